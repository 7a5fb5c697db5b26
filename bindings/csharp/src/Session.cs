// Session.cs - a conversation: input, generation, text, fork/park/prefix, the 0.4 submit_*
// calls, and Stream(), which streams a turn's text over either stepping mode.
using System;
using System.Collections.Generic;
using System.Runtime.InteropServices;
using System.Text;
using Llmkv.Native;
using N = Llmkv.Native.NativeMethods;

namespace Llmkv
{
    public sealed class Session : IDisposable
    {
        private readonly Engine _engine;
        private readonly SessionHandle _handle;
        private readonly IntPtr _native;
        private volatile bool _busy;
        private FinishReason _lastFinish;
        private Status _lastError;
        [ThreadStatic] private static byte[] t_text;

        /// <summary>Raised for each of this session's events (before Engine.EventReceived), on
        /// the thread that called Step / Poll / Run.</summary>
        public event Action<Event> EventReceived;

        /// <summary>Any object of the host's (SessionOptions.Tag).</summary>
        public object Tag { get; set; }

        public Engine Engine => _engine;
        public SessionHandle Handle => _handle;

        internal Session(Engine engine, SessionOptions o)
        {
            _engine = engine;
            o = o ?? new SessionOptions();
            Tag = o.Tag;
            uint libSize;
            var p = Library.InitParams<llmkv_session_params>(
                buf => N.llmkv_session_params_init_sized(buf, (UIntPtr)Marshal.SizeOf(typeof(llmkv_session_params))),
                N.llmkv_session_params_init, out libSize);
            if (libSize < p.struct_size) p.struct_size = libSize;   // an older library: its own size
            var s = o.Sampling;
            if (s != null)
            {
                if (s.Temperature.HasValue) p.sampling.temperature = s.Temperature.Value;
                if (s.TopK.HasValue) p.sampling.top_k = s.TopK.Value;
                if (s.TopP.HasValue) p.sampling.top_p = s.TopP.Value;
                if (s.MinP.HasValue) p.sampling.min_p = s.MinP.Value;
                if (s.RepeatPenalty.HasValue) p.sampling.repeat_penalty = s.RepeatPenalty.Value;
                if (s.Seed.HasValue) p.sampling.seed = s.Seed.Value;
                if (s.RepeatLastN.HasValue) p.sampling.repeat_last_n = s.RepeatLastN.Value;
            }
            if (o.MaxNewTokens.HasValue) p.max_new_tokens = o.MaxNewTokens.Value;
            if (o.Priority.HasValue) p.priority = o.Priority.Value;
            if (o.MinNewTokens.HasValue) p.min_new_tokens = o.MinNewTokens.Value;
            p.grammar_kind = (uint)o.GrammarKind;

            _handle = new SessionHandle();
            using (var pins = new Pins())
            using (var eu = engine.Use())
            {
                Use pu = default(Use);
                try
                {
                    if (o.Prefix != null)
                    {
                        pu = o.Prefix.Use();
                        p.prefix = pu.Ptr;
                    }
                    if (o.StopTokens != null)
                    {
                        p.stop_tokens = pins.Pin(o.StopTokens);
                        p.n_stop_tokens = (uint)o.StopTokens.Length;
                    }
                    if (o.StopStrings != null)
                    {
                        var ptrs = new IntPtr[o.StopStrings.Length];
                        var lens = new UIntPtr[o.StopStrings.Length];
                        for (int i = 0; i < ptrs.Length; i++)
                        {
                            var b = Utf8.Bytes(o.StopStrings[i] ?? throw new ArgumentNullException(nameof(o.StopStrings)));
                            ptrs[i] = pins.Pin(b.Length == 0 ? new byte[1] : b);
                            lens[i] = (UIntPtr)b.Length;
                        }
                        p.stop_strings = pins.Pin(ptrs);
                        p.stop_string_lengths = pins.Pin(lens);
                        p.n_stop_strings = (uint)ptrs.Length;
                    }
                    if (o.LogitBias != null)
                    {
                        var lb = new llmkv_logit_bias[o.LogitBias.Length];
                        for (int i = 0; i < lb.Length; i++) { lb[i].token = o.LogitBias[i].Token; lb[i].bias = o.LogitBias[i].Bias; }
                        p.logit_bias = pins.Pin(lb);
                        p.n_logit_bias = (uint)lb.Length;
                    }
                    if (o.Grammar != null)
                    {
                        var g = Utf8.Z(o.Grammar);
                        p.grammar = pins.Pin(g);
                        p.grammar_len = (UIntPtr)(g.Length - 1);
                    }
                    p.grammar_root = pins.Pin(Utf8.Z(o.GrammarRoot));

                    _handle.Bind(engine.Handle);
                    IntPtr sp = IntPtr.Zero;
                    int st;
                    try { }
                    finally
                    {
                        st = N.llmkv_session_create(eu.Ptr, ref p, out sp);
                        _handle.Set(st == N.LLMKV_OK ? sp : IntPtr.Zero);
                    }
                    Library.Check(st);
                    _native = sp;
                }
                finally { pu.Dispose(); }
            }
            engine.Register(_native, this);
        }

        private Session(Engine engine, SessionHandle handle, IntPtr native)
        {
            _engine = engine;
            _handle = handle;
            _native = native;
            engine.Register(native, this);
        }

        internal Use Use() => new Use(_handle, nameof(Session));

        public bool IsDisposed => _handle.IsClosed;

        /// <summary>True from Generate / a generating submit until its DONE or ERROR event was
        /// handed out by Step, Poll or Run.</summary>
        public bool IsBusy => _busy;

        /// <summary>The finish reason of the last DONE event handed out for this session.</summary>
        public FinishReason LastFinishReason => _lastFinish;

        /// <summary>The status of the last ERROR event handed out for this session (Ok if none).</summary>
        public Status LastErrorStatus => _lastError;

        internal void OnEvent(Event e)
        {
            if (e.Kind == EventKind.Done) { _lastFinish = e.FinishReason; _busy = false; }
            else if (e.Kind == EventKind.Error) { _lastError = e.Status; _busy = false; }
            EventReceived?.Invoke(e);
        }

        // ---- Input and generation (step mode; valid with the worker too, but they wait for a step)

        public void Append(int[] tokens)
        {
            if (tokens == null) throw new ArgumentNullException(nameof(tokens));
            using (var u = Use()) Library.Check(N.llmkv_session_append(u.Ptr, tokens, (UIntPtr)tokens.Length));
        }

        /// <summary>Tokenizes (special tokens parsed; BOS when the session is empty and the model wants one) and appends.</summary>
        public void AppendText(string text)
        {
            if (text == null) throw new ArgumentNullException(nameof(text));
            var b = Utf8.Bytes(text);
            using (var u = Use()) Library.Check(N.llmkv_session_append_text(u.Ptr, b, (UIntPtr)b.Length));
        }

        /// <summary>Asks for up to maxNewTokens tokens (0 = the session's default). TOKEN events then one DONE.</summary>
        public void Generate(uint maxNewTokens = 0)
        {
            using (var u = Use())
            {
                _busy = true;
                int st = N.llmkv_session_generate(u.Ptr, maxNewTokens);
                if (st != N.LLMKV_OK) { _busy = false; Library.Check(st); }
            }
        }

        /// <summary>Stops generating; the KV of every token so far is kept. DONE(Cancelled) follows.</summary>
        public void Cancel()
        {
            using (var u = Use()) Library.Check(N.llmkv_session_cancel(u.Ptr));
        }

        /// <summary>Moves the session's KV to the host tier (needs EngineOptions.KvHostBytes > 0).</summary>
        public void Park()
        {
            using (var u = Use()) Library.Check(N.llmkv_session_park(u.Ptr));
        }

        /// <summary>The text generated since the last read (whole UTF-8 characters), "" if none.
        /// Never waits for a step while the worker runs.</summary>
        public string ReadText()
        {
            var buf = t_text ?? (t_text = new byte[4096]);
            StringBuilder sb = null;
            for (;;)
            {
                int n = ReadText(buf);
                if (n == 0) break;
                var chunk = Utf8.Encoding.GetString(buf, 0, n);
                if (sb == null && n < buf.Length - 4) return chunk;
                (sb ?? (sb = new StringBuilder())).Append(chunk);
            }
            return sb == null ? "" : sb.ToString();
        }

        /// <summary>Raw form of ReadText: copies whole UTF-8 characters into buf, returns the byte count.</summary>
        public int ReadText(byte[] buf)
        {
            if (buf == null) throw new ArgumentNullException(nameof(buf));
            using (var u = Use())
            {
                UIntPtr n;
                Library.Check(N.llmkv_session_read_text(u.Ptr, buf, (UIntPtr)buf.Length, out n));
                return (int)n;
            }
        }

        public SessionInfo Info
        {
            get
            {
                var i = new llmkv_session_info();
                i.struct_size = (uint)Marshal.SizeOf(typeof(llmkv_session_info));
                using (var u = Use()) Library.Check(N.llmkv_session_get_info(u.Ptr, ref i));
                return new SessionInfo
                {
                    State = (SessionState)i.state, FinishReason = (FinishReason)i.finish_reason, NTokens = i.n_tokens,
                    NCached = i.n_cached, NGenerated = i.n_generated, NBlocks = i.n_blocks, Tier = (Tier)i.tier,
                    Priority = i.priority, StopString = i.stop_string, TextHeld = i.text_held,
                    HasGrammar = i.has_grammar != 0, GrammarComplete = i.grammar_complete != 0,
                };
            }
        }

        public SessionState State => Info.State;

        /// <summary>The context's tokens (prompt and generated).</summary>
        public int[] GetTokens()
        {
            var t = new int[256];
            using (var u = Use())
            {
                for (;;)
                {
                    UIntPtr n;
                    Library.Check(N.llmkv_session_get_tokens(u.Ptr, t, (UIntPtr)t.Length, out n));
                    if ((ulong)n <= (ulong)t.Length) { Array.Resize(ref t, (int)n); return t; }
                    t = new int[(int)n];
                }
            }
        }

        /// <summary>A new session with the same context, sampling state and RNG (llmkv_session_fork).</summary>
        public Session Fork()
        {
            var h = new SessionHandle();
            IntPtr f = IntPtr.Zero;
            using (var u = Use())
            {
                h.Bind(_engine.Handle);
                int st;
                try { }
                finally
                {
                    st = N.llmkv_session_fork(u.Ptr, out f);
                    h.Set(st == N.LLMKV_OK ? f : IntPtr.Zero);
                }
                Library.Check(st);
            }
            return new Session(_engine, h, f) { Tag = Tag };
        }

        /// <summary>A prefix handle holding the current context (llmkv_session_to_prefix).</summary>
        public Prefix ToPrefix()
        {
            var h = new PrefixHandle();
            using (var u = Use())
            {
                h.Bind(_engine.Handle);
                IntPtr p = IntPtr.Zero;
                int st;
                try { }
                finally
                {
                    st = N.llmkv_session_to_prefix(u.Ptr, out p);
                    h.Set(st == N.LLMKV_OK ? p : IntPtr.Zero);
                }
                Library.Check(st);
            }
            return _engine.RegisterPrefix(new Prefix(_engine, h));
        }

        /// <summary>Replaces the grammar for the generations that follow (GrammarKind.None removes it).</summary>
        public void SetGrammar(GrammarKind kind, string text, string root = null)
        {
            var b = Utf8.Z(text);
            using (var u = Use())
                Library.Check(N.llmkv_session_set_grammar(u.Ptr, (int)kind, b, (UIntPtr)(b == null ? 0 : b.Length - 1), Utf8.Z(root)));
        }

        // ---- Submit (0.4): never waits for a step; failures arrive as ERROR events

        /// <summary>Queues "append text, then (generate = true) generate up to maxNewTokens" for the
        /// next step (the worker's, or Step/Run). A failure of the request arrives as an ERROR
        /// event with its status; SubmitError() gives the message.</summary>
        public void SubmitText(string text, bool generate = true, uint maxNewTokens = 0)
        {
            var b = Utf8.Bytes(text ?? "");
            using (var u = Use())
            {
                if (generate) _busy = true;
                int st = N.llmkv_session_submit_text(u.Ptr, b, (UIntPtr)b.Length, generate ? N.LLMKV_SUBMIT_GENERATE : 0u, maxNewTokens);
                if (st != N.LLMKV_OK) { if (generate) _busy = false; Library.Check(st); }
            }
        }

        public void SubmitTokens(int[] tokens, bool generate = true, uint maxNewTokens = 0)
        {
            tokens = tokens ?? new int[0];
            using (var u = Use())
            {
                if (generate) _busy = true;
                int st = N.llmkv_session_submit_tokens(u.Ptr, tokens, (UIntPtr)tokens.Length, generate ? N.LLMKV_SUBMIT_GENERATE : 0u, maxNewTokens);
                if (st != N.LLMKV_OK) { if (generate) _busy = false; Library.Check(st); }
            }
        }

        /// <summary>Queues a cancel for the next step (nothing happens if the session is not generating then).</summary>
        public void SubmitCancel()
        {
            using (var u = Use()) Library.Check(N.llmkv_session_submit_cancel(u.Ptr));
        }

        /// <summary>The message of the session's last submitted request that failed ("" if none).</summary>
        public string SubmitError()
        {
            var buf = new byte[512];
            using (var u = Use())
            {
                for (;;)
                {
                    UIntPtr n;
                    Library.Check(N.llmkv_session_submit_error(u.Ptr, buf, (UIntPtr)buf.Length, out n));
                    if ((ulong)n < (ulong)buf.Length) return Utf8.Encoding.GetString(buf, 0, (int)n);
                    buf = new byte[(int)n + 1];
                }
            }
        }

        // ---- Streaming

        /// <summary>Appends text (may be empty), generates up to maxNewTokens and yields the text
        /// as it is generated, until this session's DONE. With the worker running it submits
        /// and polls (Engine.Poll with a short timeout); otherwise it steps the engine
        /// (Engine.Step), which advances every session with work: their events are raised as
        /// usual. Throws LlmkvException when the request fails (an ERROR event: the status and
        /// SubmitError's message; in step mode the call's own error). Leaving the loop early
        /// (break) cancels the generation.</summary>
        public IEnumerable<string> Stream(string text, uint maxNewTokens = 0)
        {
            if (text == null) throw new ArgumentNullException(nameof(text));
            return StreamIterator(text, maxNewTokens);
        }

        private IEnumerable<string> StreamIterator(string text, uint maxNewTokens)
        {
            _lastError = Status.Ok;
            bool worker = _engine.WorkerRunning;
            if (worker) SubmitText(text, true, maxNewTokens);
            else
            {
                if (text.Length > 0) AppendText(text);
                Generate(maxNewTokens);
            }
            bool finished = false;
            try
            {
                while (_busy)
                {
                    if (worker) _engine.Poll(20000);
                    else _engine.Step();
                    var t = ReadText();
                    if (t.Length > 0) yield return t;
                }
                finished = true;
            }
            finally
            {
                // The consumer stopped early (break, exception): stop generating. The DONE
                // (Cancelled) event follows from the next step or poll.
                if (!finished && _busy && !_handle.IsClosed)
                {
                    try { if (worker) SubmitCancel(); else Cancel(); }
                    catch (LlmkvException) { }
                }
            }
            var rest = ReadText();
            if (rest.Length > 0) yield return rest;
            if (_lastError != Status.Ok) throw new LlmkvException(_lastError, SubmitError());
        }

        /// <summary>Streams the turn and returns its whole text.</summary>
        public string Complete(string text, uint maxNewTokens = 0)
        {
            var sb = new StringBuilder();
            foreach (var chunk in Stream(text, maxNewTokens)) sb.Append(chunk);
            return sb.ToString();
        }

        /// <summary>Destroys the native session (its events still queued are discarded).</summary>
        public void Dispose()
        {
            if (_handle.IsClosed) return;
            _engine.Unregister(_native, this);
            _handle.Dispose();
        }
    }

    /// <summary>An immutable, refcounted run of tokens whose KV is computed once.</summary>
    public sealed class Prefix : IDisposable
    {
        private readonly Engine _engine;
        private readonly PrefixHandle _handle;

        internal Prefix(Engine engine, PrefixHandle handle) { _engine = engine; _handle = handle; }

        public Engine Engine => _engine;
        public PrefixHandle Handle => _handle;
        internal Use Use() => new Use(_handle, nameof(Prefix));
        public bool IsDisposed => _handle.IsClosed;

        public int NTokens
        {
            get { using (var u = Use()) return (int)N.llmkv_prefix_n_tokens(u.Ptr); }
        }

        public int[] GetTokens()
        {
            var t = new int[256];
            using (var u = Use())
            {
                for (;;)
                {
                    UIntPtr n;
                    Library.Check(N.llmkv_prefix_get_tokens(u.Ptr, t, (UIntPtr)t.Length, out n));
                    if ((ulong)n <= (ulong)t.Length) { Array.Resize(ref t, (int)n); return t; }
                    t = new int[(int)n];
                }
            }
        }

        /// <summary>Saves tokens and KV to a snapshot file (atomically: temporary file + rename).</summary>
        public void Save(string path)
        {
            if (path == null) throw new ArgumentNullException(nameof(path));
            using (var u = Use()) Library.Check(N.llmkv_prefix_save(u.Ptr, Utf8.Z(path)));
        }

        /// <summary>Releases the handle; sessions created from it keep the blocks they share.</summary>
        public void Dispose() { _handle.Dispose(); }
    }
}
