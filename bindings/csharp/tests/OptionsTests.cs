// OptionsTests.cs - every SessionOptions field reaches the library: stop tokens, stop strings,
// logit bias, grammar, sampling seed, priority, max/min new tokens.
using System;
using System.Collections.Generic;
using System.Linq;
using Llmkv;
using NUnit.Framework;

namespace Llmkv.Tests
{
    [TestFixture]
    public class OptionsTests
    {
        private const string Prompt = "The best way to learn to code is";

        [Test]
        public void StopTokensEndGenerationWithoutAnEvent()
        {
            using (var e = TestUtil.NewEngine())
            {
                var greedy = TestUtil.Greedy(e, Prompt, 12);
                int stop = greedy[4];
                int first = Array.IndexOf(greedy, stop);
                var finish = new Dictionary<Session, FinishReason>();
                using (var s = e.CreateSession(new SessionOptions { StopTokens = new[] { stop }, MaxNewTokens = 12 }))
                {
                    s.AppendText(Prompt);
                    s.Generate();
                    var got = TestUtil.StepUntilDone(e, new[] { s }, finish)[s];
                    Assert.AreEqual(FinishReason.Stop, finish[s]);
                    CollectionAssert.AreEqual(greedy.Take(first), got);
                }
            }
        }

        [Test]
        public void StopStringsEndGenerationAndAreNotDelivered()
        {
            using (var e = TestUtil.NewEngine())
            {
                var greedy = TestUtil.Greedy(e, Prompt, 16);
                string full = e.Detokenize(greedy);
                string before = e.Detokenize(greedy.Take(6).ToArray());
                string stop = e.Detokenize(greedy.Skip(6).Take(2).ToArray());
                Assert.IsNotEmpty(stop.Trim());
                int at = full.IndexOf(stop, StringComparison.Ordinal);
                using (var s = e.CreateSession(new SessionOptions { StopStrings = new[] { "\u00a7never\u00a7", stop }, MaxNewTokens = 16 }))
                {
                    string text = s.Complete(Prompt);
                    Assert.AreEqual(FinishReason.Stop, s.LastFinishReason);
                    Assert.AreEqual(1, s.Info.StopString, "the second stop string matched");
                    Assert.AreEqual(full.Substring(0, at), text);
                    Assert.LessOrEqual(at, before.Length);
                }
            }
        }

        [Test]
        public void LogitBiasBansAToken()
        {
            using (var e = TestUtil.NewEngine())
            {
                var greedy = TestUtil.Greedy(e, Prompt, 4);
                var banned = TestUtil.Greedy(e, Prompt, 4, new SessionOptions
                {
                    LogitBias = new[] { new LogitBias(greedy[0], float.NegativeInfinity) },
                });
                Assert.AreNotEqual(greedy[0], banned[0]);
                Assert.IsFalse(banned.Contains(greedy[0]));
                var boosted = TestUtil.Greedy(e, Prompt, 1, new SessionOptions
                {
                    LogitBias = new[] { new LogitBias(greedy[2], 100f) },
                });
                Assert.AreEqual(greedy[2], boosted[0]);
            }
        }

        [Test]
        public void GrammarConstrainsTheOutput()
        {
            using (var e = TestUtil.NewEngine())
            {
                using (var s = e.CreateSession(new SessionOptions
                {
                    GrammarKind = GrammarKind.Gbnf, Grammar = "answer ::= \"yes\" | \"no\"", GrammarRoot = "answer", MaxNewTokens = 8,
                }))
                {
                    Assert.IsTrue(s.Info.HasGrammar, "has_grammar");
                    string text = s.Complete("Is the sky blue? Answer:");
                    CollectionAssert.Contains(new[] { "yes", "no" }, text);
                    Assert.AreEqual(FinishReason.Stop, s.LastFinishReason, "ends where the sentence is complete");
                    // Replace the grammar for the next turn: a JSON Schema.
                    s.SetGrammar(GrammarKind.JsonSchema,
                        "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\"}},\"required\":[\"n\"]}");
                    string json = s.Complete(" Now JSON:", 24);
                    StringAssert.StartsWith("{", json.TrimStart());
                    StringAssert.Contains("\"n\"", json);
                    var ex = Assert.Throws<LlmkvException>(() => s.SetGrammar(GrammarKind.JsonSchema, "{\"type\": 12}"));
                    Assert.AreEqual(Status.InvalidArgument, ex.Status);
                    s.SetGrammar(GrammarKind.None, null);
                    Assert.IsFalse(s.Info.HasGrammar, "grammar removed");
                }
            }
        }

        [Test]
        public void SeededSamplingIsReproducibleAndGreedyIsTheDefault()
        {
            using (var e = TestUtil.NewEngine())
            {
                Func<ulong, SessionOptions> sampled = seed => new SessionOptions
                {
                    Sampling = new SamplingOptions { Temperature = 1.5f, TopK = 200, TopP = 0.99f, Seed = seed },
                };
                var a = TestUtil.Greedy(e, Prompt, 12, sampled(42));
                var b = TestUtil.Greedy(e, Prompt, 12, sampled(42));
                CollectionAssert.AreEqual(a, b, "same seed, same tokens");
                var others = new[] { 1ul, 2ul, 3ul }.Select(seed => TestUtil.Greedy(e, Prompt, 12, sampled(seed))).ToList();
                Assert.IsTrue(others.Any(o => !o.SequenceEqual(a)), "sampling is not greedy");
                CollectionAssert.AreEqual(TestUtil.Greedy(e, Prompt, 12),
                                          TestUtil.Greedy(e, Prompt, 12, new SessionOptions { Sampling = new SamplingOptions() }));
            }
        }

        [Test]
        public void MaxNewTokensPriorityAndMinNewTokensReachTheSession()
        {
            using (var e = TestUtil.NewEngine())
            using (var s = e.CreateSession(new SessionOptions { MaxNewTokens = 3, Priority = 7, MinNewTokens = 2 }))
            {
                Assert.AreEqual(7, s.Info.Priority);
                s.AppendText(Prompt);
                Assert.AreEqual(3, TestUtil.Run(e, s, 0).Length, "generate(0) uses MaxNewTokens");
                Assert.AreEqual(FinishReason.Length, s.LastFinishReason);
                Assert.AreEqual(3u, s.Info.NGenerated);
                // min_new_tokens bans the end of generation: an "eos after 1" prompt still gives 2.
                var eos = e.Info.EotToken >= 0 ? e.Info.EotToken : e.Info.EosToken;
                using (var t = e.CreateSession(new SessionOptions
                {
                    MinNewTokens = 2, MaxNewTokens = 2, LogitBias = new[] { new LogitBias(eos, 50f) },
                }))
                {
                    t.AppendText(Prompt);
                    Assert.AreEqual(2, TestUtil.Run(e, t, 0).Length);
                }
                using (var t = e.CreateSession(new SessionOptions { MaxNewTokens = 2, LogitBias = new[] { new LogitBias(eos, 50f) } }))
                {
                    t.AppendText(Prompt);
                    Assert.AreEqual(0, TestUtil.Run(e, t, 0).Length, "without min_new_tokens the boosted end token stops at once");
                    Assert.AreEqual(FinishReason.Stop, t.LastFinishReason);
                }
            }
        }
    }
}
