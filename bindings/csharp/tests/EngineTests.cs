// EngineTests.cs - generation over the real model: prefixes and snapshots, fork, park, a full
// pool, cancellation, eight concurrent sessions, Run and Stream. Greedy decoding is
// deterministic and batch-invariant, so outputs are compared for exact equality.
using System;
using System.Collections.Generic;
using System.IO;
using System.Linq;
using Llmkv;
using NUnit.Framework;

namespace Llmkv.Tests
{
    [TestFixture]
    public class EngineTests
    {
        [Test]
        public void InfoDescribesTheModel()
        {
            using (var e = TestUtil.NewEngine())
            {
                var i = e.Info;
                Assert.AreEqual("llama", i.Architecture);
                Assert.AreEqual("cpu", i.BackendName);
                Assert.AreEqual(Backend.Cpu, i.Backend);
                Assert.AreEqual(49152u, i.NVocab);
                Assert.AreEqual(30u, i.NLayers);
                Assert.AreEqual(2u, i.NThreads);
                Assert.IsNotEmpty(i.ModelName);
                e.Validate();
            }
        }

        /// <summary>0.5: one rank reports the engine's own bytes; TpSize splits the model's heads
        /// over CPU ranks (SmolLM2: 9 query and 3 KV heads split over 3 ranks, not over 2), each
        /// holding its share of the weights and KV, and generation works.</summary>
        [Test]
        public void TensorParallelRanksSplitTheModelAndGenerate()
        {
            TestUtil.Require05();
            EngineInfo one;
            using (var e = TestUtil.NewEngine())
            {
                one = e.Info;
                Assert.AreEqual(1u, one.TpSize);
                Assert.AreEqual(one.KvBytesPerTokenDevice, one.KvBytesPerTokenRank);
                Assert.AreEqual(one.WeightBytes, one.WeightBytesRank);
                // SmolLM2 is dense: no experts, every parameter read per token (0.6 fields).
                Assert.AreEqual(0u, one.NExpert);
                Assert.AreEqual(0u, one.NExpertUsed);
                Assert.AreEqual(one.NParams, one.NParamsActive);
                Assert.AreEqual(one.WeightBytes, one.WeightBytesActive);
                using (var s = e.CreateSession())
                {
                    Assert.IsNotEmpty(s.Complete(TestUtil.Story, 4));
                    var st = e.GetStats();
                    Assert.Greater(st.kv_bytes_used, 0ul);
                    Assert.AreEqual(st.kv_bytes_used, st.kv_bytes_used_rank);
                    Assert.AreEqual(0ul, st.tp_reduces, "no collectives with one rank");
                }
            }
            uint tp = 0, bad = 0;
            for (uint n = 2; n <= 4; n++)
            {
                if (tp == 0 && one.NHeads % n == 0 && (one.NKvHeads % n == 0 || n % one.NKvHeads == 0)) tp = n;
                if (bad == 0 && one.NHeads % n != 0) bad = n;
            }
            if (bad != 0)
            {
                var ex = Assert.Throws<LlmkvException>(() => TestUtil.NewEngine(o => o.TpSize = bad));
                Assert.AreEqual(Status.Unsupported, ex.Status);
                StringAssert.Contains("tensor parallelism", ex.Detail);
            }
            if (tp == 0) Assert.Ignore("the model's " + one.NHeads + " query / " + one.NKvHeads + " KV heads split over no rank count in 2..4");
            using (var e = TestUtil.NewEngine(o => o.TpSize = tp))
            {
                var i = e.Info;
                Assert.AreEqual(tp, i.TpSize);
                Assert.AreEqual(one.KvBytesPerTokenDevice, i.KvBytesPerTokenDevice);
                Assert.AreEqual(one.WeightBytes, i.WeightBytes);
                Assert.Greater(i.KvBytesPerTokenRank, 0ul);
                if (i.NKvHeads > 1) Assert.Less(i.KvBytesPerTokenRank, i.KvBytesPerTokenDevice, "a rank holds only its KV heads");
                Assert.Greater(i.WeightBytesRank, 0ul);
                Assert.Less(i.WeightBytesRank, i.WeightBytes, "a rank reads only its slices");
                using (var s = e.CreateSession())
                {
                    string text = s.Complete(TestUtil.Story, 8);
                    Assert.IsNotEmpty(text.Trim(), "generation at tp " + tp);
                    var st = e.GetStats();
                    Assert.Greater(st.kv_bytes_used_rank, 0ul);
                    if (i.NKvHeads > 1) Assert.Less(st.kv_bytes_used_rank, st.kv_bytes_used);
                    Assert.Greater(st.tp_reduces, 0ul, "the forward passes reduced across ranks");
                }
                e.Validate();
            }
        }

        [Test]
        public void LogHandlerReceivesTheLibrarysMessages()
        {
            var messages = new List<string>();
            Library.SetLogHandler((level, m) => { lock (messages) messages.Add(level + " " + m); }, LogLevel.Info);
            try
            {
                using (TestUtil.NewEngine()) { }
            }
            finally { Library.SetLogHandler(null); }
            int n;
            lock (messages) n = messages.Count;
            Assert.IsTrue(messages.Any(m => m.StartsWith("Info engine:") && m.Contains("30 layers")), string.Join("\n", messages));
            using (TestUtil.NewEngine()) { }
            lock (messages) Assert.AreEqual(n, messages.Count, "no message after the handler was removed");
        }

        [Test]
        public void TokenizeDetokenizeRoundTripsUnicode()
        {
            using (var e = TestUtil.NewEngine())
            {
                const string text = "Grüße, 世界! naïve café ☕";
                var t = e.Tokenize(text);
                Assert.Greater(t.Length, 5);
                Assert.AreEqual(text, e.Detokenize(t));
                var chat = e.ChatFormat(new[] { new ChatMessage("user", "Hi ☕") });
                StringAssert.Contains("<|im_start|>user", chat);
                StringAssert.Contains("Hi ☕", chat);
                var ex = Assert.Throws<LlmkvException>(() => e.ChatFormat(new[] { new ChatMessage("wizard", "x") }));
                Assert.AreEqual(Status.InvalidArgument, ex.Status);
                StringAssert.Contains("wizard", ex.Detail);
            }
        }

        [Test]
        public void GreedyTextMatchesItsTokens()
        {
            using (var e = TestUtil.NewEngine())
            using (var s = e.CreateSession())
            {
                s.AppendText("The capital of France is");
                var tokens = TestUtil.Run(e, s, 12);
                Assert.AreEqual(12, tokens.Length);
                Assert.AreEqual(FinishReason.Length, s.LastFinishReason);
                Assert.AreEqual(e.Detokenize(tokens), s.ReadText());
                StringAssert.Contains("Paris", e.Detokenize(tokens));
                Assert.AreEqual("", s.ReadText(), "text is handed out once");
                var info = s.Info;
                Assert.AreEqual(SessionState.Finished, info.State);
                Assert.AreEqual(12u, info.NGenerated);
                CollectionAssert.AreEqual(tokens, s.GetTokens().Skip((int)info.NTokens - 12).ToArray());
                // Deterministic: the same prompt again gives the same tokens.
                CollectionAssert.AreEqual(tokens, TestUtil.Greedy(e, "The capital of France is", 12));
            }
        }

        [Test]
        public void PrefixGivesTheSameTokensAsThePlainPrompt()
        {
            const string system = "<|im_start|>system\nYou are a helpful assistant who answers in one sentence about geography and history.<|im_end|>\n";
            const string user = "<|im_start|>user\nWhat is the tallest mountain?<|im_end|>\n<|im_start|>assistant\n";
            using (var e = TestUtil.NewEngine(o => o.Flags = EngineFlags.None))   // no automatic prefix cache: the handle does the sharing
            {
                var sysTokens = e.Tokenize(system, TokenizeFlags.AddBos | TokenizeFlags.ParseSpecial);
                var plain = TestUtil.Greedy(e, system + user, 16);
                Assert.AreEqual(16, plain.Length);
                using (var p = e.CreatePrefix(sysTokens))
                {
                    Assert.AreEqual(sysTokens.Length, p.NTokens);
                    CollectionAssert.AreEqual(sysTokens, p.GetTokens());
                    ulong prefilled = e.GetStats().tokens_prefilled;
                    using (var s = e.CreateSession(new SessionOptions { Prefix = p }))
                    {
                        Assert.AreEqual((uint)sysTokens.Length, s.Info.NTokens);
                        s.AppendText(user);
                        CollectionAssert.AreEqual(plain, TestUtil.Run(e, s, 16), "a session from the prefix continues as the plain prompt");
                    }
                    ulong userTokens = (ulong)e.Tokenize(user, TokenizeFlags.ParseSpecial).Length;
                    Assert.LessOrEqual(e.GetStats().tokens_prefilled - prefilled, userTokens + 1, "the prefix's tokens were not recomputed");

                    // Snapshot: save, load, same tokens again.
                    string path = TestUtil.TempPath("prefix.snap");
                    try
                    {
                        p.Save(path);
                        Assert.IsTrue(File.Exists(path));
                        using (var loaded = e.LoadPrefix(path))
                        {
                            CollectionAssert.AreEqual(sysTokens, loaded.GetTokens());
                            using (var s = e.CreateSession(new SessionOptions { Prefix = loaded }))
                            {
                                s.AppendText(user);
                                CollectionAssert.AreEqual(plain, TestUtil.Run(e, s, 16), "a session from the loaded snapshot");
                            }
                        }
                        // A flipped byte in the middle: SNAPSHOT_FORMAT, engine unchanged.
                        var bytes = File.ReadAllBytes(path);
                        bytes[bytes.Length / 2] ^= 0x5a;
                        File.WriteAllBytes(path, bytes);
                        uint before = e.GetStats().blocks_used;
                        var ex = Assert.Throws<LlmkvException>(() => e.LoadPrefix(path));
                        Assert.AreEqual(Status.SnapshotFormat, ex.Status);
                        Assert.IsNotEmpty(ex.Detail);
                        Assert.AreEqual(before, e.GetStats().blocks_used);
                        // Truncated file too.
                        File.WriteAllBytes(path, bytes.Take(bytes.Length / 3).ToArray());
                        Assert.AreEqual(Status.SnapshotFormat, Assert.Throws<LlmkvException>(() => e.LoadPrefix(path)).Status);
                        // Unknown flag bits.
                        Assert.AreEqual(Status.InvalidArgument, Assert.Throws<LlmkvException>(() => e.LoadPrefix(path, (PrefixLoadFlags)0x80)).Status);
                        File.Delete(path);
                        var io = Assert.Throws<LlmkvException>(() => e.LoadPrefix(path));
                        Assert.AreEqual(Status.Io, io.Status);
                    }
                    finally { File.Delete(path); }
                }
                e.Validate();
            }
        }

        [Test]
        public void ToPrefixCapturesASessionsContext()
        {
            using (var e = TestUtil.NewEngine())
            using (var s = e.CreateSession())
            {
                s.AppendText(TestUtil.Story);
                var first = TestUtil.Run(e, s, 6);
                var expected = TestUtil.Run(e, s, 6);   // what continues after those 6
                using (var s0 = e.CreateSession())
                {
                    s0.AppendText(TestUtil.Story);
                    TestUtil.Run(e, s0, 6);
                    using (var p = s0.ToPrefix())
                    using (var s1 = e.CreateSession(new SessionOptions { Prefix = p }))
                    {
                        CollectionAssert.AreEqual(s0.GetTokens(), p.GetTokens());
                        CollectionAssert.AreEqual(expected, TestUtil.Run(e, s1, 6));
                    }
                }
                Assert.AreEqual(6, first.Length);
            }
        }

        [Test]
        public void ForkContinuesIdentically()
        {
            using (var e = TestUtil.NewEngine())
            using (var s = e.CreateSession())
            {
                s.AppendText(TestUtil.Story);
                TestUtil.Run(e, s, 5);
                Assert.IsNotEmpty(s.ReadText());   // unread text is not part of the fork
                using (var f = s.Fork())
                {
                    CollectionAssert.AreEqual(s.GetTokens(), f.GetTokens());
                    // Both continue in the same steps and produce the same tokens.
                    s.Generate(10);
                    f.Generate(10);
                    var r = TestUtil.StepUntilDone(e, new[] { s, f });
                    Assert.AreEqual(10, r[s].Count);
                    CollectionAssert.AreEqual(r[s], r[f]);
                    Assert.AreEqual(s.ReadText(), f.ReadText());
                }
                e.Validate();
            }
        }

        [Test]
        public void ParkedSessionResumesWithTheSameTokens()
        {
            using (var e = TestUtil.NewEngine(o => o.KvHostBytes = 64ul << 20))
            {
                var turn2 = " The next morning,";
                int[] unparked;
                using (var s = e.CreateSession())
                {
                    s.AppendText(TestUtil.Story);
                    TestUtil.Run(e, s, 20);
                    s.AppendText(turn2);
                    unparked = TestUtil.Run(e, s, 12);
                }
                using (var s = e.CreateSession())
                {
                    s.AppendText(TestUtil.Story);
                    TestUtil.Run(e, s, 20);
                    s.Park();
                    Assert.AreEqual(Tier.Host, s.Info.Tier);
                    Assert.AreEqual(1ul, e.GetStats().parks);
                    s.AppendText(turn2);
                    CollectionAssert.AreEqual(unparked, TestUtil.Run(e, s, 12));
                    Assert.AreEqual(Tier.Device, s.Info.Tier);
                    Assert.AreEqual(1ul, e.GetStats().resumes);
                    Assert.Greater(e.GetStats().bytes_to_host, 0ul);
                }
                e.Validate();
            }
        }

        [Test]
        public void FullPoolIsKvCapacity()
        {
            using (var e = TestUtil.NewEngine(o => o.MaxSessions = 2))
            {
                using (var a = e.CreateSession())
                using (var b = e.CreateSession())
                {
                    var ex = Assert.Throws<LlmkvException>(() => e.CreateSession());
                    Assert.AreEqual(Status.KvCapacity, ex.Status);
                    Assert.IsNotEmpty(ex.Detail);
                    Assert.AreEqual(Status.KvCapacity, Assert.Throws<LlmkvException>(() => e.CreatePrefix(new[] { 1, 2, 3 })).Status);
                }
                using (var c = e.CreateSession()) { }   // room again
            }
            using (var e = TestUtil.NewEngine(o => o.KvDeviceBytes = 1ul << 20))
            {
                ulong perToken = e.Info.KvBytesPerTokenDevice;
                int n = (int)((1ul << 20) / perToken) * 3 + 64;
                var tokens = Enumerable.Range(0, n).Select(i => 100 + i % 500).ToArray();
                var ex = Assert.Throws<LlmkvException>(() => e.CreatePrefix(tokens));
                Assert.AreEqual(Status.KvCapacity, ex.Status);
                Assert.IsNotEmpty(ex.Detail);
                Assert.AreEqual(0u, e.GetStats().blocks_used, "nothing is kept");
                e.Validate();
                // The engine still works.
                Assert.AreEqual(4, TestUtil.Greedy(e, "Hello", 4).Length);
            }
        }

        [Test]
        public void CancelKeepsTheKvOfTheTokensSoFar()
        {
            using (var e = TestUtil.NewEngine())
            {
                var reference = TestUtil.Greedy(e, TestUtil.Story, 20);
                Assert.AreEqual(20, reference.Length, "precondition: the story runs 20 tokens");
                using (var s = e.CreateSession())
                {
                    s.AppendText(TestUtil.Story);
                    int promptTokens = s.GetTokens().Length;
                    s.Generate(40);
                    var got = new List<int>();
                    FinishReason finish = FinishReason.None;
                    bool cancelled = false;
                    for (int i = 0; i < 500 && s.IsBusy; i++)
                    {
                        foreach (var ev in e.Step())
                        {
                            if (ev.Session != s) continue;
                            if (ev.Kind == EventKind.Token) got.Add(ev.Token);
                            if (ev.Kind == EventKind.Done) finish = ev.FinishReason;
                        }
                        if (!cancelled && got.Count >= 5) { s.Cancel(); cancelled = true; }
                    }
                    Assert.IsTrue(cancelled);
                    Assert.AreEqual(FinishReason.Cancelled, finish);
                    Assert.AreEqual(FinishReason.Cancelled, s.Info.FinishReason);
                    Assert.AreEqual(5, got.Count, "no token after the cancel");
                    var info = s.Info;
                    Assert.AreEqual((uint)(promptTokens + got.Count), info.NTokens);
                    Assert.AreEqual(info.NTokens - 1, info.NCached, "the KV of every token so far is kept");
                    CollectionAssert.AreEqual(reference.Take(5), got);
                    // Continuing recomputes nothing but the last token and goes on as if never cancelled.
                    ulong prefilled = e.GetStats().tokens_prefilled;
                    var rest = TestUtil.Run(e, s, 15);
                    Assert.LessOrEqual(e.GetStats().tokens_prefilled - prefilled, 1ul);
                    CollectionAssert.AreEqual(reference, TestUtil.Concat(got.ToArray(), rest));
                }
            }
        }

        private static readonly string[] Prompts =
        {
            "The capital of France is", "My favourite fruit is", "Once upon a time", "The best way to learn to code is",
            "In the year 2050, cars will", "Water boils at", "Dear diary, today I", "The three primary colors are",
        };

        [Test]
        public void EightConcurrentSessionsProduceExactlyTheirSoloTokens()
        {
            using (var e = TestUtil.NewEngine(o => o.Flags = EngineFlags.None))
            {
                var alone = Prompts.Select(p => TestUtil.Greedy(e, p, 12)).ToArray();
                var sessions = Prompts.Select(p => { var s = e.CreateSession(); s.AppendText(p); return s; }).ToList();
                try
                {
                    foreach (var s in sessions) s.Generate(12);
                    ulong steps = e.GetStats().steps;
                    var together = TestUtil.StepUntilDone(e, sessions);
                    Assert.Less(e.GetStats().steps - steps, 8ul * 12, "the sessions shared steps");
                    for (int i = 0; i < Prompts.Length; i++)
                    {
                        Assert.IsNotEmpty(alone[i]);
                        CollectionAssert.AreEqual(alone[i], together[sessions[i]], Prompts[i]);
                        Assert.AreEqual(e.Detokenize(alone[i]), sessions[i].ReadText(), Prompts[i]);
                    }
                    // Not all the same: the comparison means something.
                    Assert.Greater(alone.Select(a => string.Join(",", a)).Distinct().Count(), 4);
                }
                finally { foreach (var s in sessions) s.Dispose(); }
                e.Validate();
            }
        }

        [Test]
        public void ThreadsStreamingTheirOwnSessionsGetTheirSoloText()
        {
            // Each thread steps the engine for its own session; a step may hand out the other
            // sessions' events, which the binding routes to their Session objects.
            using (var e = TestUtil.NewEngine())
            {
                var expected = Prompts.Take(4).Select(p => e.Detokenize(TestUtil.Greedy(e, p, 10))).ToArray();
                var got = new string[4];
                var errors = new List<Exception>();
                var threads = Enumerable.Range(0, 4).Select(i => new System.Threading.Thread(() =>
                {
                    try
                    {
                        using (var s = e.CreateSession()) got[i] = s.Complete(Prompts[i], 10);
                    }
                    catch (Exception ex) { lock (errors) errors.Add(ex); }
                })).ToList();
                foreach (var t in threads) t.Start();
                foreach (var t in threads) t.Join();
                Assert.IsEmpty(errors, string.Join("\n", errors));
                CollectionAssert.AreEqual(expected, got);
                e.Validate();
            }
        }

        [Test]
        public void HasWorkTellsWhenStepHasSomethingToDo()
        {
            using (var e = TestUtil.NewEngine(o => o.MaxBatchTokens = 16))
            using (var s = e.CreateSession())
            {
                Assert.IsFalse(e.HasWork);
                s.AppendText(TestUtil.Story + TestUtil.Story + TestUtil.Story);   // several 16-token chunks
                Assert.IsTrue(e.HasWork);
                var first = e.Step();
                Assert.IsEmpty(first, "a prefill-only step has no event");
                Assert.IsTrue(e.HasWork, "...but more to do");
                int steps = 1;
                while (e.HasWork) { Assert.IsEmpty(e.Step()); steps++; Assert.Less(steps, 100); }
                Assert.Greater(steps, 2);
                s.Generate(3);
                Assert.IsTrue(e.HasWork);
                TestUtil.StepUntilDone(e, new[] { s });
                Assert.IsFalse(e.HasWork);
            }
        }

        [Test]
        public void StepHandsOutMoreEventsThanItsBuffer()
        {
            // 300 sessions generating one token each: one step, 600 events (TOKEN + DONE), more
            // than the binding's 256-event buffer; Step returns all of them.
            using (var e = TestUtil.NewEngine(o => { o.MaxSessions = 320; o.MaxBatchTokens = 2048; }))
            {
                var sessions = Enumerable.Range(0, 300).Select(i => e.CreateSession()).ToList();
                try
                {
                    foreach (var s in sessions) { s.Append(new[] { 1, 2 }); }
                    while (e.HasWork) e.Step();
                    foreach (var s in sessions) s.Generate(1);
                    var events = e.Step();
                    Assert.AreEqual(600, events.Count, "one step, all its events");
                    Assert.AreEqual(0, e.PendingEvents);
                    Assert.AreEqual(300, events.Count(x => x.Kind == EventKind.Done));
                    Assert.IsTrue(sessions.All(x => !x.IsBusy));
                }
                finally { foreach (var s in sessions) s.Dispose(); }
            }
        }

        [Test]
        public void RunRaisesEveryEvent()
        {
            using (var e = TestUtil.NewEngine())
            using (var a = e.CreateSession())
            using (var b = e.CreateSession())
            {
                var expectedA = TestUtil.Greedy(e, Prompts[0], 6);
                var expectedB = TestUtil.Greedy(e, Prompts[1], 6);
                a.AppendText(Prompts[0]); a.Generate(6);
                b.AppendText(Prompts[1]); b.Generate(6);
                var got = new Dictionary<Session, List<int>> { { a, new List<int>() }, { b, new List<int>() } };
                int done = 0, sessionEvents = 0;
                a.EventReceived += ev => sessionEvents++;
                e.EventReceived += ev =>
                {
                    if (ev.Kind == EventKind.Token) got[ev.Session].Add(ev.Token);
                    if (ev.Kind == EventKind.Done) { done++; Assert.AreEqual(FinishReason.Length, ev.FinishReason); }
                };
                e.Run();
                Assert.AreEqual(2, done);
                Assert.AreEqual(7, sessionEvents);
                CollectionAssert.AreEqual(expectedA, got[a]);
                CollectionAssert.AreEqual(expectedB, got[b]);
                Assert.IsFalse(a.IsBusy);

                // A throwing handler does not cross the native frames; Run rethrows it after.
                a.Generate(3);
                e.EventReceived += ev => { throw new InvalidOperationException("boom"); };
                var ex = Assert.Throws<AggregateException>(() => e.Run());
                Assert.IsInstanceOf<InvalidOperationException>(ex.InnerException);
                Assert.AreEqual(0, e.PendingEvents);
            }
        }

        [Test]
        public void StreamYieldsTheTurnsText()
        {
            using (var e = TestUtil.NewEngine())
            using (var s = e.CreateSession())
            {
                var expected = e.Detokenize(TestUtil.Greedy(e, Prompts[2], 16));
                var chunks = s.Stream(Prompts[2], 16).ToList();
                Assert.Greater(chunks.Count, 1, "streamed in pieces");
                Assert.AreEqual(expected, string.Concat(chunks));
                Assert.AreEqual(FinishReason.Length, s.LastFinishReason);
                // The next turn continues the conversation.
                var more = s.Complete(" And then", 4);
                Assert.IsNotEmpty(more);
                Assert.AreEqual(Status.State, Assert.Throws<LlmkvException>(() => e.CreateSession().Stream("", 1).ToList()).Status);

                // Leaving the loop early cancels the generation; the KV of what came is kept.
                foreach (var chunk in s.Stream(" Once more,", 200)) { Assert.IsNotEmpty(chunk); break; }
                Assert.IsTrue(s.IsBusy, "the DONE comes from the next step");
                TestUtil.StepUntilDone(e, new[] { s });
                Assert.AreEqual(FinishReason.Cancelled, s.LastFinishReason);
                Assert.Less(s.Info.NGenerated, 200u);
                Assert.AreEqual(s.Info.NTokens - 1, s.Info.NCached);
            }
        }
    }
}
