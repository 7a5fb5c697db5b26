// ErrorTests.cs - statuses and detail messages, bad arguments, disposed handles.
using System;
using System.IO;
using System.Linq;
using Llmkv;
using NUnit.Framework;

namespace Llmkv.Tests
{
    [TestFixture]
    public class NoModelTests
    {
        [Test]
        public void StatusStringsNameTheCodes()
        {
            Assert.AreEqual("LLMKV_OK", Library.StatusString(Status.Ok));
            Assert.AreEqual("LLMKV_ERR_STATE", Library.StatusString(Status.State));
            Assert.AreEqual("LLMKV_ERR_SNAPSHOT_FORMAT", Library.StatusString(Status.SnapshotFormat));
            Assert.AreEqual("LLMKV_ERR_UNKNOWN", Library.StatusString((Status)(-1234)));
        }

        [Test]
        public void MissingModelFileIsIoWithTheLibrarysMessage()
        {
            string path = TestUtil.TempPath("does-not-exist.gguf");
            var e = Assert.Throws<LlmkvException>(() => new Engine(new EngineOptions(path)));
            Assert.AreEqual(Status.Io, e.Status);
            StringAssert.Contains("does-not-exist.gguf", e.Detail, "the detail names the file");
            StringAssert.StartsWith("LLMKV_ERR_IO: ", e.Message);
            // The same message the library keeps for this thread.
            Assert.AreEqual(e.Detail, Library.LastError);
        }

        [Test]
        public void GarbageModelFileIsModelFormat()
        {
            string path = TestUtil.TempPath("garbage.gguf");
            File.WriteAllBytes(path, Enumerable.Range(0, 4096).Select(i => (byte)(i * 7 + 3)).ToArray());
            try
            {
                var e = Assert.Throws<LlmkvException>(() => new Engine(new EngineOptions(path)));
                Assert.AreEqual(Status.ModelFormat, e.Status);
                Assert.IsNotEmpty(e.Detail);
            }
            finally { File.Delete(path); }
        }

        [Test]
        public void NullModelPathIsInvalidArgument()
        {
            var e = Assert.Throws<LlmkvException>(() => new Engine(new EngineOptions()));
            Assert.AreEqual(Status.InvalidArgument, e.Status);
            Assert.IsNotEmpty(e.Detail);
        }

        [Test]
        public void BadEngineValuesAreInvalidArgumentWithTheFieldNamed()
        {
            TestUtil.Require04();
            // Values are checked before the file is opened: no model needed.
            string missing = TestUtil.TempPath("missing.gguf");
            var e = Assert.Throws<LlmkvException>(() => new Engine(new EngineOptions(missing) { ThreadPriority = 20 }));
            Assert.AreEqual(Status.InvalidArgument, e.Status);
            StringAssert.Contains("thread_priority = 20", e.Detail);
            e = Assert.Throws<LlmkvException>(() => new Engine(new EngineOptions(missing) { SpinUs = 100001 }));
            Assert.AreEqual(Status.InvalidArgument, e.Status);
            StringAssert.Contains("spin_us", e.Detail);
            e = Assert.Throws<LlmkvException>(() => new Engine(new EngineOptions(missing) { KvResidualTokens = 5000 }));
            Assert.AreEqual(Status.InvalidArgument, e.Status);
            StringAssert.Contains("kv_residual_tokens", e.Detail);
            e = Assert.Throws<LlmkvException>(() => new Engine(new EngineOptions(missing) { TpSize = 257 }));
            if (TestUtil.Is05)
            {
                Assert.AreEqual(Status.InvalidArgument, e.Status);
                StringAssert.Contains("tp_size = 257", e.Detail);
            }
            else Assert.AreEqual(Status.Unsupported, e.Status, "a library before 0.5 has no tp_size");
        }

        [Test]
        public void ErrorMessagesAreThreadLocal()
        {
            // A failure on another thread does not replace this thread's message.
            var mine = Assert.Throws<LlmkvException>(() => new Engine(new EngineOptions(TestUtil.TempPath("mine.gguf"))));
            var t = new System.Threading.Thread(() =>
            {
                try { new Engine(new EngineOptions()); } catch (LlmkvException) { }
            });
            t.Start();
            t.Join();
            Assert.AreEqual(mine.Detail, Library.LastError);
        }
    }

    [TestFixture]
    public class ErrorTests
    {
        [Test]
        public void TokenOutsideTheVocabularyIsInvalidArgument()
        {
            using (var e = TestUtil.NewEngine())
            using (var s = e.CreateSession())
            {
                int nVocab = (int)e.Info.NVocab;
                Assert.Greater(nVocab, 1000);
                var ex = Assert.Throws<LlmkvException>(() => s.Append(new[] { 1, nVocab }));
                Assert.AreEqual(Status.InvalidArgument, ex.Status);
                StringAssert.Contains(nVocab.ToString(), ex.Detail, "the detail names the bad token");
                Assert.AreEqual(0u, s.Info.NTokens, "nothing was queued");
                ex = Assert.Throws<LlmkvException>(() => s.Append(new[] { -1 }));
                Assert.AreEqual(Status.InvalidArgument, ex.Status);
                ex = Assert.Throws<LlmkvException>(() => e.Detokenize(new[] { nVocab + 5 }));
                Assert.AreEqual(Status.InvalidArgument, ex.Status);
                ex = Assert.Throws<LlmkvException>(() => e.CreatePrefix(new[] { 1, 2, nVocab }));
                Assert.AreEqual(Status.InvalidArgument, ex.Status);
            }
        }

        [Test]
        public void WrongStateIsStateWithAMessage()
        {
            using (var e = TestUtil.NewEngine())
            using (var s = e.CreateSession())
            {
                var ex = Assert.Throws<LlmkvException>(() => s.Generate(4));   // nothing to continue from
                Assert.AreEqual(Status.State, ex.Status);
                Assert.IsNotEmpty(ex.Detail);
                Assert.IsFalse(s.IsBusy);
                ex = Assert.Throws<LlmkvException>(() => s.Cancel());         // not generating
                Assert.AreEqual(Status.State, ex.Status);
                ex = Assert.Throws<LlmkvException>(() => s.Park());           // no host tier
                Assert.AreEqual(Status.Unsupported, ex.Status);
            }
        }

        [Test]
        public void BadGrammarIsInvalidArgumentWithThePosition()
        {
            using (var e = TestUtil.NewEngine())
            {
                var ex = Assert.Throws<LlmkvException>(() => e.CreateSession(new SessionOptions
                {
                    GrammarKind = GrammarKind.Gbnf, Grammar = "root ::= \"a\" | (",
                }));
                Assert.AreEqual(Status.InvalidArgument, ex.Status);
                StringAssert.Contains("1", ex.Detail);
                Assert.AreEqual(0u, e.GetStats().sessions_total);
            }
        }

        [Test]
        public void DisposedHandlesThrowObjectDisposed()
        {
            var e = TestUtil.NewEngine();
            var s = e.CreateSession();
            var s2 = e.CreateSession();
            var p = e.CreatePrefix(e.Tokenize("Hello there", TokenizeFlags.AddBos));
            s.Dispose();
            s.Dispose();   // twice is fine
            Assert.IsTrue(s.IsDisposed);
            Assert.Throws<ObjectDisposedException>(() => s.AppendText("x"));
            Assert.Throws<ObjectDisposedException>(() => s.Generate());
            Assert.Throws<ObjectDisposedException>(() => { var i = s.Info; });
            Assert.Throws<ObjectDisposedException>(() => s.ReadText());
            Assert.Throws<ObjectDisposedException>(() => s.Fork());
            Assert.AreEqual(1u, e.GetStats().sessions_total, "the disposed session was destroyed");

            // Disposing the engine disposes what was made from it.
            e.Dispose();
            Assert.IsTrue(e.IsDisposed);
            Assert.IsTrue(s2.IsDisposed);
            Assert.IsTrue(p.IsDisposed);
            Assert.Throws<ObjectDisposedException>(() => s2.AppendText("x"));
            Assert.Throws<ObjectDisposedException>(() => { var n = p.NTokens; });
            Assert.Throws<ObjectDisposedException>(() => e.Step());
            Assert.Throws<ObjectDisposedException>(() => e.CreateSession());
            Assert.Throws<ObjectDisposedException>(() => { var i = e.Info; });
            e.Dispose();
        }

        [Test]
        public void PrefixOfAnotherEngineIsRejected()
        {
            using (var e1 = TestUtil.NewEngine())
            using (var e2 = TestUtil.NewEngine())
            using (var p = e1.CreatePrefix(e1.Tokenize("Hello", TokenizeFlags.AddBos)))
            {
                var ex = Assert.Throws<LlmkvException>(() => e2.CreateSession(new SessionOptions { Prefix = p }));
                Assert.AreEqual(Status.InvalidArgument, ex.Status);
                StringAssert.Contains("prefix", ex.Detail);
                Assert.AreEqual(0u, e2.GetStats().sessions_total);
            }
        }

        [Test]
        public void SessionsLeftToTheGcAreDestroyedWithoutTheEngineFirst()
        {
            // Sessions and prefixes that are never disposed hold a reference on the engine's
            // handle: finalizers then run in any order without use after free.
            WeakReference engineRef = MakeGarbage();
            for (int i = 0; i < 5 && engineRef.IsAlive; i++)
            {
                GC.Collect();
                GC.WaitForPendingFinalizers();
            }
            Assert.IsFalse(engineRef.IsAlive);
            using (var e = TestUtil.NewEngine()) Assert.AreEqual(0u, e.GetStats().sessions_total);
        }

        private static WeakReference MakeGarbage()
        {
            var e = TestUtil.NewEngine();
            for (int i = 0; i < 3; i++)
            {
                var s = e.CreateSession();
                s.AppendText("Garbage " + i);
            }
            e.CreatePrefix(e.Tokenize("A prefix", TokenizeFlags.AddBos));
            return new WeakReference(e.Handle);
        }
    }
}
