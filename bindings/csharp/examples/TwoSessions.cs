// TwoSessions.cs - two sessions over one model, their text streamed interleaved as it is
// generated, each chunk labelled with its session.
//
//   mono TwoSessions.exe [MODEL.gguf] [--step]
//
// By default the engine's own worker thread steps (0.4's game-loop mode) and this loop plays
// a frame: Poll the events, read each session's new text, never waiting for a forward pass.
// --step (or a library older than 0.4) steps the engine from this thread instead.
using System;
using System.Collections.Generic;
using Llmkv;

public static class TwoSessions
{
    public static int Main(string[] args)
    {
        string model = Environment.GetEnvironmentVariable("LLMKV_MODEL");
        bool step = false;
        foreach (var a in args)
        {
            if (a == "--step") step = true;
            else model = a;
        }
        if (string.IsNullOrEmpty(model))
        {
            Console.Error.WriteLine("usage: TwoSessions.exe MODEL.gguf [--step]   (or set LLMKV_MODEL)");
            return 2;
        }
        if (Library.Version < 400) step = true;

        var questions = new Dictionary<string, string>
        {
            { "A", "What is the capital of France?" },
            { "B", "Name three primary colors." },
        };
        try
        {
            using (var engine = new Engine(new EngineOptions(model) { NThreads = 2 }))
            {
                var sessions = new List<Session>();
                foreach (var q in questions)
                {
                    var s = engine.CreateSession(new SessionOptions { MaxNewTokens = 48, Tag = q.Key });
                    sessions.Add(s);
                    string prompt = engine.ChatFormat(new[] { new ChatMessage("user", q.Value) });
                    Console.WriteLine("[{0}] asks: {1}", q.Key, q.Value);
                    if (step)
                    {
                        s.AppendText(prompt);
                        s.Generate();
                    }
                    else s.SubmitText(prompt, generate: true);
                }
                Console.WriteLine("mode: " + (step ? "llmkv_step from this thread" : "worker thread + Poll per frame"));
                if (!step) engine.StartWorker();

                var open = new HashSet<Session>(sessions);
                var finish = new Dictionary<Session, string>();
                var ntokens = new Dictionary<Session, int>();
                foreach (var s in sessions) ntokens[s] = 0;
                engine.EventReceived += ev =>
                {
                    if (ev.Session == null) return;
                    if (ev.Kind == EventKind.Token) ntokens[ev.Session]++;
                    else if (ev.Kind == EventKind.Done) { finish[ev.Session] = ev.FinishReason.ToString(); open.Remove(ev.Session); }
                    else { finish[ev.Session] = "error " + ev.Status + ": " + ev.Session.SubmitError(); open.Remove(ev.Session); }
                };
                int frames = 0;
                while (open.Count > 0)
                {
                    if (step) engine.Step();
                    else engine.Poll(16000);   // a 60 fps frame's worth at most; 0 would never block
                    frames++;
                    foreach (var s in sessions)
                    {
                        string chunk = s.ReadText();
                        if (chunk.Length > 0) Console.WriteLine("[{0}] {1}", s.Tag, chunk.Replace("\n", "\\n"));
                    }
                }
                if (!step) engine.StopWorker();
                foreach (var s in sessions)
                {
                    string rest = s.ReadText();
                    if (rest.Length > 0) Console.WriteLine("[{0}] {1}", s.Tag, rest.Replace("\n", "\\n"));
                    Console.WriteLine("done: {0} {1} ({2} tokens)", s.Tag, finish[s], ntokens[s]);
                }
                Console.WriteLine("frames: " + frames);
            }
            return 0;
        }
        catch (LlmkvException e)
        {
            Console.Error.WriteLine("llmkv: " + e.Message);
            return 1;
        }
    }
}
