// Engine.cs - the idiomatic engine: creation from EngineOptions, info/stats, tokens and text,
// prefixes, stepping (Step, Run) and the 0.4 worker mode (StartWorker, Poll, StopWorker).
using System;
using System.Collections.Generic;
using System.Runtime.InteropServices;
using System.Threading;
using Llmkv.Native;
using N = Llmkv.Native.NativeMethods;

namespace Llmkv
{
    public sealed class Engine : IDisposable
    {
        private readonly EngineHandle _handle;
        private readonly object _lock = new object();
        private readonly Dictionary<IntPtr, WeakReference<Session>> _sessions = new Dictionary<IntPtr, WeakReference<Session>>();
        private readonly List<WeakReference<Prefix>> _prefixes = new List<WeakReference<Prefix>>();
        private volatile bool _workerRunning;

        [ThreadStatic] private static llmkv_event[] t_events;

        /// <summary>Raised for every event Step, Poll and Run hand out, on the thread that
        /// called them, after the session's own EventReceived.</summary>
        public event Action<Event> EventReceived;

        public EngineHandle Handle => _handle;

        /// <summary>True between StartWorker and StopWorker (false again once Poll reported
        /// that the worker stopped itself on a fatal status).</summary>
        public bool WorkerRunning => _workerRunning;

        /// <summary>Loads the model (llmkv_engine_create). Throws LlmkvException (IO, MODEL_FORMAT,
        /// INVALID_ARGUMENT, UNSUPPORTED, OUT_OF_MEMORY).</summary>
        public Engine(EngineOptions options)
        {
            if (options == null) throw new ArgumentNullException(nameof(options));
            uint libSize;
            var p = Library.InitParams<llmkv_engine_params>(
                buf => N.llmkv_engine_params_init_sized(buf, (UIntPtr)Marshal.SizeOf(typeof(llmkv_engine_params))),
                N.llmkv_engine_params_init, out libSize);
            if (libSize < (uint)Marshal.SizeOf(typeof(llmkv_engine_params)))
            {
                // An older library (0.4, 0.3) writes its own, shorter size (InitParams keeps it
                // as struct_size): the fields appended after it do not exist there, so asking
                // for them must fail rather than be ignored.
                p.struct_size = libSize;
                if (libSize <= (uint)Marshal.OffsetOf(typeof(llmkv_engine_params), "spin_us").ToInt32())
                {
                    p.spin_us = -1;   // not read by that library; the 0.4 default for clarity
                    if ((options.SpinUs.HasValue && options.SpinUs.Value != -1) ||
                        (options.ThreadPriority.HasValue && options.ThreadPriority.Value != 0))
                        throw new LlmkvException(Status.Unsupported,
                            "the loaded library " + Library.VersionString + " has no spin_us/thread_priority (added in 0.4)");
                }
                if (options.TpSize.HasValue && options.TpSize.Value > 1)
                    throw new LlmkvException(Status.Unsupported,
                        "the loaded library " + Library.VersionString + " has no tp_size (added in 0.5)");
            }
            if (options.Backend.HasValue) p.backend = (int)options.Backend.Value;
            if (options.NThreads.HasValue) p.n_threads = options.NThreads.Value;
            if (options.KvDtypeK.HasValue) p.kv_dtype_k = (int)options.KvDtypeK.Value;
            if (options.KvDtypeV.HasValue) p.kv_dtype_v = (int)options.KvDtypeV.Value;
            if (options.KvBlockTokens.HasValue) p.kv_block_tokens = options.KvBlockTokens.Value;
            if (options.KvDeviceBytes.HasValue) p.kv_device_bytes = options.KvDeviceBytes.Value;
            if (options.KvHostBytes.HasValue) p.kv_host_bytes = options.KvHostBytes.Value;
            if (options.MaxBatchTokens.HasValue) p.max_batch_tokens = options.MaxBatchTokens.Value;
            if (options.MaxContext.HasValue) p.max_context = options.MaxContext.Value;
            if (options.Flags.HasValue) p.flags = (uint)options.Flags.Value;
            if (options.MaxSessions.HasValue) p.max_sessions = options.MaxSessions.Value;
            if (options.KvResidualTokens.HasValue) p.kv_residual_tokens = options.KvResidualTokens.Value;
            if (options.KvRotation.HasValue) p.kv_rotation = (int)options.KvRotation.Value;
            if (options.SpinUs.HasValue) p.spin_us = options.SpinUs.Value;
            if (options.ThreadPriority.HasValue) p.thread_priority = options.ThreadPriority.Value;
            if (options.TpSize.HasValue) p.tp_size = options.TpSize.Value;

            _handle = new EngineHandle();
            using (var pins = new Pins())
            {
                p.model_path = pins.Pin(Utf8.Z(options.ModelPath));
                if (options.Devices != null)
                {
                    p.devices = pins.Pin(options.Devices);
                    p.n_devices = (uint)options.Devices.Length;
                }
                IntPtr e = IntPtr.Zero;
                int st;
                try { }
                finally
                {
                    // No asynchronous exception between the create and the handle owning it.
                    st = N.llmkv_engine_create(ref p, out e);
                    if (st == N.LLMKV_OK) _handle.Set(e);
                }
                Library.Check(st);
            }
        }

        /// <summary>A library before 0.5 refuses the 0.5 sizes of llmkv_engine_info and
        /// llmkv_stats; it is asked for its own (the struct up to the first 0.5 field).</summary>
        private static bool LibraryBefore05 => Library.Version < 500;
        /// <summary>A 0.5 library refuses the 0.6 size of llmkv_engine_info (the same
        /// way).</summary>
        private static bool LibraryBefore06 => Library.Version < 600;

        public EngineInfo Info
        {
            get
            {
                var i = new llmkv_engine_info();
                bool old = LibraryBefore05, before06 = LibraryBefore06;
                i.struct_size = (uint)(old ? Marshal.OffsetOf(typeof(llmkv_engine_info), "kv_bytes_per_token_rank").ToInt32()
                                     : before06 ? Marshal.OffsetOf(typeof(llmkv_engine_info), "n_expert").ToInt32()
                                                : Marshal.SizeOf(typeof(llmkv_engine_info)));
                using (var u = Use()) Library.Check(N.llmkv_engine_get_info(u.Ptr, ref i));
                if (old)
                {   // what the header says an engine without tensor parallelism reports
                    i.kv_bytes_per_token_rank = i.kv_bytes_per_token_device;
                    i.weight_bytes_rank = i.weight_bytes;
                }
                if (before06)
                {   // what the header says a dense model reports (a 0.5 library loads no other)
                    i.n_params_active = i.n_params;
                    i.weight_bytes_active = i.weight_bytes;
                }
                return new EngineInfo
                {
                    ModelName = Utf8.FromBuffer(i.model_name), Architecture = Utf8.FromBuffer(i.architecture),
                    BackendName = Utf8.FromBuffer(i.backend_name), Backend = (Backend)i.backend,
                    NVocab = i.n_vocab, NCtxTrain = i.n_ctx_train, MaxContext = i.max_context, NLayers = i.n_layers,
                    NEmbd = i.n_embd, NHeads = i.n_heads, NKvHeads = i.n_kv_heads, HeadDim = i.head_dim,
                    NThreads = i.n_threads, KvBlockTokens = i.kv_block_tokens, KvDtypeK = (KvDtype)i.kv_dtype_k,
                    KvDtypeV = (KvDtype)i.kv_dtype_v, TpSize = i.tp_size, NParams = i.n_params, WeightBytes = i.weight_bytes,
                    KvBytesPerTokenDevice = i.kv_bytes_per_token_device, KvBytesPerTokenTail = i.kv_bytes_per_token_tail,
                    KvDeviceBytes = i.kv_device_bytes, KvBlocksTotal = i.kv_blocks_total,
                    KvTailBlocksTotal = i.kv_tail_blocks_total, KvResidualTokens = i.kv_residual_tokens,
                    KvRotateK = i.kv_rotate_k != 0, KvRotateV = i.kv_rotate_v != 0,
                    BosToken = i.bos_token, EosToken = i.eos_token, EotToken = i.eot_token,
                    NUnrepresentableBytes = i.n_unrepresentable_bytes, KvWindow = i.kv_window,
                    KvLayerGroups = i.kv_layer_groups, KvBytesPerTokenGlobal = i.kv_bytes_per_token_global,
                    KvBytesPerTokenRank = i.kv_bytes_per_token_rank, WeightBytesRank = i.weight_bytes_rank,
                    NExpert = i.n_expert, NExpertUsed = i.n_expert_used, NParamsActive = i.n_params_active,
                    WeightBytesActive = i.weight_bytes_active,
                };
            }
        }

        /// <summary>llmkv_engine_get_stats (the raw struct: its fields are the header's). From a
        /// library before 0.5, kv_bytes_used_rank is kv_bytes_used and the tp_* counters are 0
        /// (one rank).</summary>
        public llmkv_stats GetStats()
        {
            var s = new llmkv_stats();
            bool old = LibraryBefore05;
            s.struct_size = (uint)(old ? Marshal.OffsetOf(typeof(llmkv_stats), "kv_bytes_used_rank").ToInt32()
                                       : Marshal.SizeOf(typeof(llmkv_stats)));
            using (var u = Use()) Library.Check(N.llmkv_engine_get_stats(u.Ptr, ref s));
            if (old) s.kv_bytes_used_rank = s.kv_bytes_used;
            return s;
        }

        /// <summary>Checks the KV pool invariants; throws LlmkvException(Internal) when broken.</summary>
        public void Validate()
        {
            using (var u = Use()) Library.Check(N.llmkv_engine_validate(u.Ptr));
        }

        // ---- Tokens and text

        public int[] Tokenize(string text, TokenizeFlags flags = TokenizeFlags.None)
        {
            if (text == null) throw new ArgumentNullException(nameof(text));
            var bytes = Utf8.Bytes(text);
            var tokens = new int[bytes.Length + 8];
            using (var u = Use())
            {
                for (;;)
                {
                    UIntPtr n;
                    int st = N.llmkv_tokenize(u.Ptr, bytes, (UIntPtr)bytes.Length, (uint)flags, tokens, (UIntPtr)tokens.Length, out n);
                    if (st == N.LLMKV_ERR_INVALID_ARGUMENT && (ulong)n > (ulong)tokens.Length) { tokens = new int[(int)n]; continue; }
                    Library.Check(st);
                    Array.Resize(ref tokens, (int)n);
                    return tokens;
                }
            }
        }

        public string Detokenize(int[] tokens)
        {
            if (tokens == null) throw new ArgumentNullException(nameof(tokens));
            var buf = new byte[tokens.Length * 8 + 16];
            using (var u = Use())
            {
                for (;;)
                {
                    UIntPtr n;
                    int st = N.llmkv_detokenize(u.Ptr, tokens, (UIntPtr)tokens.Length, buf, (UIntPtr)buf.Length, out n);
                    if (st == N.LLMKV_ERR_INVALID_ARGUMENT && (ulong)n > (ulong)buf.Length) { buf = new byte[(int)n]; continue; }
                    Library.Check(st);
                    return Utf8.Encoding.GetString(buf, 0, (int)n);
                }
            }
        }

        /// <summary>Formats messages with the model's chat template (llmkv_chat_format).</summary>
        public string ChatFormat(IList<ChatMessage> messages, bool addGenerationPrompt = true)
        {
            if (messages == null) throw new ArgumentNullException(nameof(messages));
            using (var pins = new Pins())
            using (var u = Use())
            {
                var raw = new llmkv_chat_message[messages.Count];
                int total = 64;
                for (int i = 0; i < raw.Length; i++)
                {
                    var r = Utf8.Z(messages[i].Role);
                    var c = Utf8.Z(messages[i].Content);
                    raw[i].role = pins.Pin(r);
                    raw[i].content = pins.Pin(c);
                    total += (r?.Length ?? 0) + (c?.Length ?? 0) + 32;
                }
                var buf = new byte[total];
                for (;;)
                {
                    UIntPtr n;
                    int st = N.llmkv_chat_format(u.Ptr, raw, (UIntPtr)raw.Length, addGenerationPrompt ? 1 : 0, buf, (UIntPtr)buf.Length, out n);
                    if (st == N.LLMKV_ERR_INVALID_ARGUMENT && (ulong)n >= (ulong)buf.Length) { buf = new byte[(int)n + 1]; continue; }
                    Library.Check(st);
                    return Utf8.Encoding.GetString(buf, 0, (int)n);
                }
            }
        }

        // ---- Sessions and prefixes

        public Session CreateSession(SessionOptions options = null) => new Session(this, options);

        /// <summary>Computes the KV of the tokens now (llmkv_prefix_create).</summary>
        public Prefix CreatePrefix(int[] tokens)
        {
            if (tokens == null) throw new ArgumentNullException(nameof(tokens));
            var h = new PrefixHandle();
            using (var u = Use())
            {
                h.Bind(_handle);
                IntPtr p = IntPtr.Zero;
                int st;
                try { }
                finally
                {
                    st = N.llmkv_prefix_create(u.Ptr, tokens, (UIntPtr)tokens.Length, out p);
                    h.Set(st == N.LLMKV_OK ? p : IntPtr.Zero);
                }
                Library.Check(st);
            }
            return RegisterPrefix(new Prefix(this, h));
        }

        public Prefix CreatePrefix(string text, TokenizeFlags flags = TokenizeFlags.AddBos | TokenizeFlags.ParseSpecial)
            => CreatePrefix(Tokenize(text, flags));

        /// <summary>Loads a snapshot written by Prefix.Save (llmkv_prefix_load_ex).</summary>
        public Prefix LoadPrefix(string path, PrefixLoadFlags flags = PrefixLoadFlags.None)
        {
            if (path == null) throw new ArgumentNullException(nameof(path));
            var h = new PrefixHandle();
            using (var u = Use())
            {
                h.Bind(_handle);
                IntPtr p = IntPtr.Zero;
                int st;
                try { }
                finally
                {
                    st = N.llmkv_prefix_load_ex(u.Ptr, Utf8.Z(path), (uint)flags, out p);
                    h.Set(st == N.LLMKV_OK ? p : IntPtr.Zero);
                }
                Library.Check(st);
            }
            return RegisterPrefix(new Prefix(this, h));
        }

        internal Prefix RegisterPrefix(Prefix p)
        {
            lock (_lock)
            {
                _prefixes.RemoveAll(w => { Prefix x; return !w.TryGetTarget(out x) || x.IsDisposed; });
                _prefixes.Add(new WeakReference<Prefix>(p));
            }
            return p;
        }

        internal void Register(IntPtr native, Session s)
        {
            lock (_lock) _sessions[native] = new WeakReference<Session>(s);
        }

        internal void Unregister(IntPtr native, Session s)
        {
            lock (_lock)
            {
                WeakReference<Session> w;
                Session x;
                if (_sessions.TryGetValue(native, out w) && (!w.TryGetTarget(out x) || x == s)) _sessions.Remove(native);
            }
        }

        private Session Find(IntPtr native)
        {
            lock (_lock)
            {
                WeakReference<Session> w;
                Session s;
                return _sessions.TryGetValue(native, out w) && w.TryGetTarget(out s) ? s : null;
            }
        }

        // ---- Stepping

        /// <summary>Number of events waiting for Step / Poll.</summary>
        public int PendingEvents
        {
            get { using (var u = Use()) return (int)N.llmkv_pending_events(u.Ptr); }
        }

        /// <summary>llmkv_engine_has_work: a session has input to run, a generation in progress or
        /// a submitted request waiting, so Step has something to do. (Step returns no event
        /// after a step that only prefilled; loop on this, not on the event count.) Throws
        /// LlmkvException(Unsupported) with a library built before the function existed.</summary>
        public bool HasWork
        {
            get
            {
                using (var u = Use())
                {
                    try { return N.llmkv_engine_has_work(u.Ptr) != 0; }
                    catch (EntryPointNotFoundException)
                    {
                        throw new LlmkvException(Status.Unsupported,
                            "the loaded library " + Library.VersionString + " has no llmkv_engine_has_work");
                    }
                }
            }
        }

        /// <summary>One scheduling iteration (llmkv_step): one batched forward pass. Returns its
        /// events (empty when there was no work) and raises them. STATE while the worker runs.</summary>
        public List<Event> Step()
        {
            var list = new List<Event>();
            var buf = Buffer();
            using (var u = Use())
            {
                UIntPtr n;
                Library.Check(N.llmkv_step(u.Ptr, buf, (UIntPtr)buf.Length, out n));
                Collect(buf, (int)n, list);
                // A full buffer: the rest of the step's events are still queued. Without the
                // worker, llmkv_worker_poll hands out queued events without stepping.
                while ((int)n == buf.Length)
                {
                    Library.Check(N.llmkv_worker_poll(u.Ptr, buf, (UIntPtr)buf.Length, 0, out n));
                    Collect(buf, (int)n, list);
                }
            }
            Dispatch(list);
            return list;
        }

        /// <summary>Frame-loop friendly: moves the queued events out (llmkv_worker_poll with
        /// timeout 0 unless given) and raises them. Never waits for a forward pass. Valid
        /// without the worker too (events of submitted requests that failed). When a step of
        /// the worker failed, throws LlmkvException once with that status, after the events
        /// queued before it were raised.</summary>
        public List<Event> Poll(uint timeoutUs = 0)
        {
            var list = new List<Event>();
            var buf = Buffer();
            LlmkvException failure = null;
            using (var u = Use())
            {
                for (uint t = timeoutUs;; t = 0)
                {
                    UIntPtr n = UIntPtr.Zero;
                    int st = N.llmkv_worker_poll(u.Ptr, buf, (UIntPtr)buf.Length, t, out n);
                    if (st != N.LLMKV_OK)
                    {
                        failure = new LlmkvException((Status)st, Library.LastError);
                        if (st == N.LLMKV_ERR_BACKEND || st == N.LLMKV_ERR_INTERNAL) _workerRunning = false;
                        // The header does not say whether a failing poll also hands out events;
                        // keep any it reports rather than drop them.
                        Collect(buf, (int)Math.Min((ulong)n, (ulong)buf.Length), list);
                        break;
                    }
                    Collect(buf, (int)n, list);
                    if ((int)n < buf.Length) break;
                }
            }
            Dispatch(list);
            if (failure != null) throw failure;
            return list;
        }

        /// <summary>Poll without allocating (for a frame loop): moves up to events.Length queued
        /// events into the caller's array, raises them and returns the count. Same rules as
        /// Poll(uint).</summary>
        public int Poll(Event[] events, uint timeoutUs = 0)
        {
            if (events == null) throw new ArgumentNullException(nameof(events));
            var buf = Buffer();
            int cap = Math.Min(events.Length, buf.Length);
            int count;
            LlmkvException failure = null;
            using (var u = Use())
            {
                UIntPtr n = UIntPtr.Zero;
                int st = N.llmkv_worker_poll(u.Ptr, buf, (UIntPtr)cap, timeoutUs, out n);
                count = (int)Math.Min((ulong)n, (ulong)cap);
                if (st != N.LLMKV_OK)
                {
                    failure = new LlmkvException((Status)st, Library.LastError);
                    if (st == N.LLMKV_ERR_BACKEND || st == N.LLMKV_ERR_INTERNAL) _workerRunning = false;
                }
                for (int i = 0; i < count; i++) events[i] = Convert(buf[i]);
            }
            for (int i = 0; i < count; i++) Raise(events[i]);
            if (failure != null) throw failure;
            return count;
        }

        /// <summary>Steps until no session has work (llmkv_run), raising each event. The handlers
        /// run inside the library's call and must not call into this engine; an exception
        /// from a handler is rethrown once run returns.</summary>
        public void Run()
        {
            var ctx = new RunContext { Engine = this };
            var gch = GCHandle.Alloc(ctx);
            try
            {
                using (var u = Use()) Library.Check(N.llmkv_run(u.Ptr, s_runThunk, GCHandle.ToIntPtr(gch)));
            }
            finally { gch.Free(); }
            if (ctx.Error != null) throw new AggregateException("an event handler threw during Run", ctx.Error);
        }

        private sealed class RunContext
        {
            public Engine Engine;
            public Exception Error;
        }

        private static readonly llmkv_event_fn s_runThunk = RunThunk;

        [MonoPInvokeCallback(typeof(llmkv_event_fn))]
        private static void RunThunk(IntPtr ev, IntPtr userData)
        {
            var ctx = (RunContext)GCHandle.FromIntPtr(userData).Target;
            if (ctx.Error != null) return;
            try
            {
                var raw = (llmkv_event)Marshal.PtrToStructure(ev, typeof(llmkv_event));
                ctx.Engine.Raise(ctx.Engine.Convert(raw));
            }
            catch (Exception e) { ctx.Error = e; }
        }

        // ---- Worker mode (0.4)

        /// <summary>Starts the engine's own stepping thread (llmkv_worker_start). From then on a
        /// frame calls only Poll, Session.SubmitText/SubmitTokens/SubmitCancel/ReadText/SubmitError.</summary>
        public void StartWorker()
        {
            using (var u = Use())
            {
                int st;
                try { st = N.llmkv_worker_start(u.Ptr); }
                catch (EntryPointNotFoundException)
                {
                    throw new LlmkvException(Status.Unsupported,
                        "the loaded library " + Library.VersionString + " has no worker thread (added in 0.4)");
                }
                Library.Check(st);
            }
            _workerRunning = true;
        }

        /// <summary>Stops the worker after the step in progress and joins it; queued events stay for Poll/Step.</summary>
        public void StopWorker()
        {
            using (var u = Use()) Library.Check(N.llmkv_worker_stop(u.Ptr));
            _workerRunning = false;
        }

        // ---- Event plumbing

        private static llmkv_event[] Buffer() => t_events ?? (t_events = new llmkv_event[256]);

        private void Collect(llmkv_event[] buf, int n, List<Event> list)
        {
            for (int i = 0; i < n; i++) list.Add(Convert(buf[i]));
        }

        private Event Convert(llmkv_event raw)
        {
            return new Event
            {
                Kind = (EventKind)raw.kind,
                Session = Find(raw.session),
                Token = raw.token,
                FinishReason = (FinishReason)raw.finish_reason,
                Status = (Status)raw.status,
            };
        }

        private void Dispatch(List<Event> list)
        {
            foreach (var e in list) Raise(e);
        }

        private void Raise(Event e)
        {
            e.Session?.OnEvent(e);
            EventReceived?.Invoke(e);
        }

        internal Use Use() => new Use(_handle, nameof(Engine));

        public bool IsDisposed => _handle.IsClosed;

        /// <summary>Disposes every session and prefix still alive, then the engine (which stops
        /// the worker). A call in progress on another thread finishes first.</summary>
        public void Dispose()
        {
            List<Session> sessions;
            List<Prefix> prefixes;
            lock (_lock)
            {
                sessions = new List<Session>();
                foreach (var w in _sessions.Values) { Session s; if (w.TryGetTarget(out s)) sessions.Add(s); }
                prefixes = new List<Prefix>();
                foreach (var w in _prefixes) { Prefix p; if (w.TryGetTarget(out p)) prefixes.Add(p); }
            }
            foreach (var s in sessions) s.Dispose();
            foreach (var p in prefixes) p.Dispose();
            _workerRunning = false;
            _handle.Dispose();
        }
    }
}
