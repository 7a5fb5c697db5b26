// WorkerTests.cs - 0.4's game-loop mode: the engine's worker thread steps, the test thread
// submits and polls like a frame would.
using System;
using System.Collections.Generic;
using System.Linq;
using Llmkv;
using NUnit.Framework;

namespace Llmkv.Tests
{
    [TestFixture]
    public class WorkerTests
    {
        /// <summary>Polls (as a frame loop would, with a short wait) until every session had its
        /// DONE or ERROR; returns the events per session. Bounded by a poll count, not a time.</summary>
        private static Dictionary<Session, List<Event>> PollUntilDone(Engine e, IList<Session> sessions,
                                                                      Dictionary<Session, string> text = null)
        {
            var got = sessions.ToDictionary(s => s, s => new List<Event>());
            var open = new HashSet<Session>(sessions);
            for (int i = 0; open.Count > 0; i++)
            {
                if (i > 20000) Assert.Fail("no DONE after 20000 polls");
                foreach (var ev in e.Poll(50000))
                {
                    if (ev.Session == null || !got.ContainsKey(ev.Session)) continue;
                    got[ev.Session].Add(ev);
                    if (ev.Kind != EventKind.Token) open.Remove(ev.Session);
                }
                if (text != null) foreach (var s in sessions) text[s] = (text.ContainsKey(s) ? text[s] : "") + s.ReadText();
            }
            return got;
        }

        private static int[] Tokens(List<Event> evs) => evs.Where(x => x.Kind == EventKind.Token).Select(x => x.Token).ToArray();

        [Test]
        public void SubmitPollReadGivesTheStepModeTokensAndText()
        {
            TestUtil.Require04();
            using (var e = TestUtil.NewEngine(o => o.ThreadPriority = 5))
            {
                string[] prompts = { "The capital of France is", "Once upon a time", "Water boils at" };
                var expected = prompts.Select(p => TestUtil.Greedy(e, p, 10)).ToArray();
                var sessions = prompts.Select(p => e.CreateSession()).ToList();
                e.StartWorker();
                Assert.IsTrue(e.WorkerRunning);
                Assert.AreEqual(Status.State, Assert.Throws<LlmkvException>(() => e.StartWorker()).Status);
                var stepEx = Assert.Throws<LlmkvException>(() => e.Step());
                Assert.AreEqual(Status.State, stepEx.Status, "llmkv_step is STATE while the worker runs");
                Assert.IsNotEmpty(stepEx.Detail);
                for (int i = 0; i < prompts.Length; i++) sessions[i].SubmitText(prompts[i], true, 10);
                var text = new Dictionary<Session, string>();
                var got = PollUntilDone(e, sessions, text);
                for (int i = 0; i < prompts.Length; i++)
                {
                    var evs = got[sessions[i]];
                    CollectionAssert.AreEqual(expected[i], Tokens(evs), prompts[i]);
                    Assert.AreEqual(EventKind.Done, evs.Last().Kind);
                    Assert.AreEqual(FinishReason.Length, evs.Last().FinishReason);
                    Assert.AreEqual(e.Detokenize(expected[i]), text[sessions[i]] + sessions[i].ReadText(), prompts[i]);
                }
                // A second turn through submit_tokens, then stop.
                var more = e.Tokenize(" Then");
                sessions[0].SubmitTokens(more, true, 3);
                Assert.AreEqual(3, Tokens(PollUntilDone(e, new[] { sessions[0] })[sessions[0]]).Length);
                e.StopWorker();
                Assert.IsFalse(e.WorkerRunning);
                e.StopWorker();   // stopping a stopped worker does nothing
                // Step mode works again.
                sessions[1].AppendText(" Again");
                Assert.AreEqual(2, TestUtil.Run(e, sessions[1], 2).Length);
                foreach (var s in sessions) s.Dispose();
                e.Validate();
            }
        }

        private static List<int> NiceValues()
        {
            var r = new List<int>();
            foreach (var dir in System.IO.Directory.GetDirectories("/proc/self/task"))
            {
                try
                {
                    var stat = System.IO.File.ReadAllText(dir + "/stat");
                    var fields = stat.Substring(stat.LastIndexOf(')') + 2).Split(' ');
                    r.Add(int.Parse(fields[16]));   // field 19 of stat: nice
                }
                catch (System.IO.IOException) { }
            }
            return r;
        }

        [Test]
        public void ThreadPriorityLowersTheLibrarysThreads()
        {
            TestUtil.Require04();
            if (!System.IO.Directory.Exists("/proc/self/task")) Assert.Ignore("needs Linux /proc to read thread priorities");
            Assert.IsFalse(NiceValues().Contains(7), "precondition: no thread at nice 7 yet");
            using (var e = TestUtil.NewEngine(o => o.ThreadPriority = 7))
            using (var s = e.CreateSession())
            {
                e.StartWorker();
                Assert.IsNotEmpty(s.Complete("Hello", 4));
                Assert.IsTrue(NiceValues().Contains(7), "the worker runs 7 nice levels lower: " + string.Join(",", NiceValues()));
                e.StopWorker();
            }
        }

        [Test]
        public void FailedSubmitArrivesAsAnErrorEventWithItsMessage()
        {
            TestUtil.Require04();
            using (var e = TestUtil.NewEngine())
            using (var s = e.CreateSession())
            using (var ok = e.CreateSession())
            {
                int nVocab = (int)e.Info.NVocab;
                e.StartWorker();
                Assert.AreEqual("", s.SubmitError(), "no failed request yet");
                s.SubmitTokens(new[] { 1, 2, nVocab + 7 }, true, 4);
                ok.SubmitText("Hello", true, 3);
                var got = PollUntilDone(e, new[] { s, ok });
                Assert.AreEqual(1, got[s].Count);
                Assert.AreEqual(EventKind.Error, got[s][0].Kind);
                Assert.AreEqual(Status.InvalidArgument, got[s][0].Status);
                Assert.AreEqual(Status.InvalidArgument, s.LastErrorStatus);
                StringAssert.Contains((nVocab + 7).ToString(), s.SubmitError(), "the message names the bad token");
                Assert.AreEqual(0u, s.Info.NTokens, "the session is as before the request");
                Assert.AreEqual(3, Tokens(got[ok]).Length, "other sessions are not affected");

                // Generating while generating: STATE, as an event too.
                ok.SubmitText(" world", true, 200);
                ok.SubmitText("", true, 1);
                var got2 = PollUntilDone(e, new[] { ok });   // returns at the ERROR, the first request goes on
                var err = got2[ok].Single(x => x.Kind != EventKind.Token);
                Assert.AreEqual(EventKind.Error, err.Kind, string.Join(" ", got2[ok].Select(x => x.ToString())));
                Assert.AreEqual(Status.State, err.Status);
                StringAssert.Contains("generat", ok.SubmitError());
                ok.SubmitCancel();
                var got3 = PollUntilDone(e, new[] { ok });
                Assert.AreEqual(EventKind.Done, got3[ok].Last().Kind);
                Assert.AreEqual(FinishReason.Cancelled, got3[ok].Last().FinishReason);
                Assert.AreEqual(FinishReason.Cancelled, ok.LastFinishReason);
                e.StopWorker();

                // Argument errors are returned at once (raw layer: unknown flag bits, NULL session).
                Assert.AreEqual(Native.NativeMethods.LLMKV_ERR_INVALID_ARGUMENT,
                    Native.NativeMethods.llmkv_session_submit_text(s.Handle.DangerousGetHandle(), new byte[1], UIntPtr.Zero, 0x80u, 0));
                Assert.IsNotEmpty(Library.LastError);
                Assert.AreEqual(Native.NativeMethods.LLMKV_ERR_INVALID_ARGUMENT,
                    Native.NativeMethods.llmkv_session_submit_cancel(IntPtr.Zero));
            }
        }

        [Test]
        public void SubmitCancelEndsGenerationKeepingTheKv()
        {
            TestUtil.Require04();
            using (var e = TestUtil.NewEngine())
            using (var s = e.CreateSession())
            {
                e.StartWorker();
                s.SubmitText(TestUtil.Story, true, 500);
                var tokens = new List<int>();
                FinishReason finish = FinishReason.None;
                bool cancelled = false;
                var frame = new Event[4];   // the allocation-free Poll, a small array: several polls per step
                for (int i = 0; i < 20000 && finish == FinishReason.None; i++)
                {
                    int n = e.Poll(frame, 50000);
                    Assert.LessOrEqual(n, frame.Length);
                    foreach (var ev in frame.Take(n))
                    {
                        if (ev.Session != s) continue;
                        if (ev.Kind == EventKind.Token) tokens.Add(ev.Token);
                        else if (ev.Kind == EventKind.Done) finish = ev.FinishReason;
                        else Assert.Fail("error " + ev.Status);
                    }
                    if (!cancelled && tokens.Count >= 3) { s.SubmitCancel(); cancelled = true; }
                }
                Assert.AreEqual(FinishReason.Cancelled, finish);
                Assert.Less(tokens.Count, 500);
                e.StopWorker();
                var info = s.Info;
                Assert.AreEqual(FinishReason.Cancelled, info.FinishReason);
                Assert.AreEqual(info.NTokens - 1, info.NCached);
                CollectionAssert.AreEqual(TestUtil.Greedy(e, TestUtil.Story, (uint)tokens.Count), tokens);
            }
        }

        [Test]
        public void StreamUsesTheWorkerWhenItRuns()
        {
            TestUtil.Require04();
            using (var e = TestUtil.NewEngine())
            using (var s = e.CreateSession())
            {
                var expected = e.Detokenize(TestUtil.Greedy(e, "The best way to learn to code is", 12));
                e.StartWorker();
                Assert.AreEqual(expected, string.Concat(s.Stream("The best way to learn to code is", 12)));
                // A failing turn throws with the status and the submit error message.
                using (var empty = e.CreateSession())
                {
                    var ex = Assert.Throws<LlmkvException>(() => empty.Stream("").ToList());
                    Assert.AreEqual(Status.State, ex.Status);
                    Assert.IsNotEmpty(ex.Detail);
                    Assert.AreEqual(empty.SubmitError(), ex.Detail);
                }
                e.StopWorker();
            }
        }
    }
}
