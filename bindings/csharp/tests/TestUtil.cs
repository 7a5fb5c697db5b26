// TestUtil.cs - shared helpers: the model (tests that need it are Ignored with the reason
// when LLMKV_MODEL is unset or missing), engine options, and greedy generation by stepping.
using System;
using System.Collections.Generic;
using System.IO;
using Llmkv;
using NUnit.Framework;

namespace Llmkv.Tests
{
    internal static class TestUtil
    {
        public static string ModelPath
        {
            get
            {
                var m = Environment.GetEnvironmentVariable("LLMKV_MODEL");
                if (string.IsNullOrEmpty(m)) Assert.Ignore("needs the model: LLMKV_MODEL is not set");
                if (!File.Exists(m)) Assert.Ignore("needs the model: LLMKV_MODEL=" + m + " does not exist");
                return m;
            }
        }

        public static bool Is04 => Library.Version >= 400;
        public static bool Is05 => Library.Version >= 500;

        /// <summary>Options over the real model; polite on a shared machine (no spinning) when the
        /// library has spin_us.</summary>
        public static EngineOptions Options(Action<EngineOptions> tweak = null)
        {
            var o = new EngineOptions(ModelPath) { NThreads = 2, Backend = Backend.Cpu };
            if (Is04) o.SpinUs = 0;
            tweak?.Invoke(o);
            return o;
        }

        public static Engine NewEngine(Action<EngineOptions> tweak = null) => new Engine(Options(tweak));

        public static void Require04()
        {
            if (!Is04) Assert.Ignore("needs a 0.4 library (worker mode); loaded: " + Library.VersionString);
        }

        public static void Require05()
        {
            if (!Is05) Assert.Ignore("needs a 0.5 library (tensor parallelism); loaded: " + Library.VersionString);
        }

        /// <summary>Steps the engine until every listed session had its DONE or ERROR; returns
        /// each session's TOKEN ids; fails after maxSteps.</summary>
        public static Dictionary<Session, List<int>> StepUntilDone(Engine e, IList<Session> sessions,
                                                                  Dictionary<Session, FinishReason> finish = null, int maxSteps = 5000)
        {
            var tokens = new Dictionary<Session, List<int>>();
            var open = new HashSet<Session>(sessions);
            foreach (var s in sessions) tokens[s] = new List<int>();
            for (int i = 0; open.Count > 0; i++)
            {
                if (i >= maxSteps) Assert.Fail("sessions still open after " + maxSteps + " steps");
                foreach (var ev in e.Step())
                {
                    if (ev.Session == null || !tokens.ContainsKey(ev.Session)) continue;
                    if (ev.Kind == EventKind.Token) tokens[ev.Session].Add(ev.Token);
                    else if (ev.Kind == EventKind.Error) Assert.Fail("unexpected ERROR event " + ev.Status);
                    else { open.Remove(ev.Session); if (finish != null) finish[ev.Session] = ev.FinishReason; }
                }
            }
            return tokens;
        }

        /// <summary>Greedy tokens for a prompt in a fresh session of the engine.</summary>
        public static int[] Greedy(Engine e, string prompt, uint n, SessionOptions so = null)
        {
            using (var s = e.CreateSession(so))
            {
                s.AppendText(prompt);
                s.Generate(n);
                return StepUntilDone(e, new[] { s })[s].ToArray();
            }
        }

        public static int[] Run(Engine e, Session s, uint n)
        {
            s.Generate(n);
            return StepUntilDone(e, new[] { s })[s].ToArray();
        }

        public static int[] Concat(int[] a, int[] b)
        {
            var r = new int[a.Length + b.Length];
            a.CopyTo(r, 0);
            b.CopyTo(r, a.Length);
            return r;
        }

        /// <summary>A scratch file path: under LLMKV_CS_TMPDIR (test.sh points it into build/), else the system temp dir.</summary>
        public static string TempPath(string name)
        {
            var dir = Environment.GetEnvironmentVariable("LLMKV_CS_TMPDIR");
            if (string.IsNullOrEmpty(dir)) dir = Path.GetTempPath();
            Directory.CreateDirectory(dir);
            return Path.Combine(dir, "llmkv-cs-" + System.Diagnostics.Process.GetCurrentProcess().Id + "-" + name);
        }

        public const string Story = "Once upon a time, in a small village by the sea, there lived";
    }
}
