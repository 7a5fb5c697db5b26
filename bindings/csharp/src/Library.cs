// Library.cs - process-wide functions (version, status names, logging), the error check
// every call goes through, UTF-8 helpers and the SafeHandles.
using System;
using System.Collections.Generic;
using System.Runtime.InteropServices;
using System.Text;
using System.Threading;
using Llmkv.Native;
using N = Llmkv.Native.NativeMethods;

namespace Llmkv
{
    /// <summary>Unity's IL2CPP wants this attribute (matched by name) on static methods that
    /// native code calls back.</summary>
    [AttributeUsage(AttributeTargets.Method)]
    internal sealed class MonoPInvokeCallbackAttribute : Attribute
    {
        public MonoPInvokeCallbackAttribute(Type delegateType) { DelegateType = delegateType; }
        public Type DelegateType { get; }
    }

    public static class Library
    {
        /// <summary>MAJOR*10000 + MINOR*100 + PATCH of the library actually loaded.</summary>
        public static int Version => N.llmkv_version();

        /// <summary>The header version this binding was written against.</summary>
        public const int BindingVersion = N.LLMKV_VERSION_NUMBER;

        public static string VersionString => Utf8.FromPtr(N.llmkv_version_string());

        /// <summary>"LLMKV_ERR_STATE"; "LLMKV_ERR_UNKNOWN" for other values.</summary>
        public static string StatusString(Status status) => Utf8.FromPtr(N.llmkv_status_string((int)status));

        /// <summary>The detail message of the last failing call on this thread.</summary>
        public static string LastError => Utf8.FromPtr(N.llmkv_last_error());

        /// <summary>Throws LlmkvException for a failing status, with llmkv_last_error() read on
        /// this thread at once (before any other llmkv call can replace it).</summary>
        internal static void Check(int status)
        {
            if (status != N.LLMKV_OK) throw new LlmkvException((Status)status, Utf8.FromPtr(N.llmkv_last_error()));
        }

        /// <summary>Runs llmkv_*_params_init_sized (0.4) with this binding's size, or on a library
        /// before 0.4 (no sized init) the unsized llmkv_*_params_init, into a scratch buffer larger
        /// than any version of the struct, and returns the defaults as T with struct_size (the
        /// first field) clamped to this binding's size. libSize receives the size the library
        /// wrote (smaller for an older library).</summary>
        internal static T InitParams<T>(Action<IntPtr> sizedInit, Action<IntPtr> unsizedInit, out uint libSize) where T : struct
        {
            Action<IntPtr> init = p =>
            {
                try { sizedInit(p); }
                catch (EntryPointNotFoundException) { unsizedInit(p); }
            };
            const int Scratch = 4096;
            int size = Marshal.SizeOf(typeof(T));
            IntPtr buf = Marshal.AllocHGlobal(Scratch);
            try
            {
                Marshal.Copy(new byte[Scratch], 0, buf, Scratch);
                init(buf);
                libSize = (uint)Marshal.ReadInt32(buf);
                if (libSize < (uint)size) Marshal.Copy(new byte[size - (int)libSize], 0, buf + (int)libSize, size - (int)libSize);
                else Marshal.WriteInt32(buf, size);
                return (T)Marshal.PtrToStructure(buf, typeof(T));
            }
            finally { Marshal.FreeHGlobal(buf); }
        }

        // ---- Logging
        private static readonly llmkv_log_fn s_logThunk = LogThunk;
        private static Action<LogLevel, string> s_logHandler;
        private static readonly object s_logLock = new object();

        /// <summary>Installs a process-wide log handler (null restores the library's default,
        /// which writes WARN and ERROR to stderr). The handler runs on whatever thread calls
        /// into the library, must be thread-safe, must not call into the engine, and must not
        /// throw (exceptions are swallowed: they cannot cross native frames).</summary>
        public static void SetLogHandler(Action<LogLevel, string> handler, LogLevel maxLevel = LogLevel.Info)
        {
            lock (s_logLock)
            {
                s_logHandler = handler;
                N.llmkv_log_set(handler == null ? null : s_logThunk, IntPtr.Zero, (int)maxLevel);
            }
        }

        [MonoPInvokeCallback(typeof(llmkv_log_fn))]
        private static void LogThunk(int level, IntPtr message, IntPtr userData)
        {
            var h = s_logHandler;
            if (h == null) return;
            try { h((LogLevel)level, Utf8.FromPtr(message)); } catch { }
        }
    }

    internal static class Utf8
    {
        internal static readonly UTF8Encoding Encoding = new UTF8Encoding(false, false);

        /// <summary>NUL-terminated UTF-8 bytes (null stays null).</summary>
        internal static byte[] Z(string s)
        {
            if (s == null) return null;
            var b = new byte[Encoding.GetByteCount(s) + 1];
            Encoding.GetBytes(s, 0, s.Length, b, 0);
            return b;
        }

        internal static byte[] Bytes(string s) => s == null ? null : Encoding.GetBytes(s);

        internal static string FromPtr(IntPtr p)
        {
            if (p == IntPtr.Zero) return null;
            int n = 0;
            while (Marshal.ReadByte(p, n) != 0) n++;
            var b = new byte[n];
            Marshal.Copy(p, b, 0, n);
            return Encoding.GetString(b);
        }

        internal static string FromBuffer(byte[] b)
        {
            if (b == null) return "";
            int n = Array.IndexOf(b, (byte)0);
            return Encoding.GetString(b, 0, n < 0 ? b.Length : n);
        }
    }

    /// <summary>Pins arrays for the duration of a native call that reads pointers out of a struct.</summary>
    internal sealed class Pins : IDisposable
    {
        private readonly List<GCHandle> _handles = new List<GCHandle>();

        public IntPtr Pin(object array)
        {
            if (array == null) return IntPtr.Zero;
            var h = GCHandle.Alloc(array, GCHandleType.Pinned);
            _handles.Add(h);
            return h.AddrOfPinnedObject();
        }

        public void Dispose()
        {
            foreach (var h in _handles) h.Free();
            _handles.Clear();
        }
    }

    /// <summary>An llmkv_engine *. Released with llmkv_engine_destroy once the handle and every
    /// session/prefix handle made from it are released (those hold a reference, so the GC
    /// never destroys an engine before its sessions).</summary>
    public sealed class EngineHandle : SafeHandle
    {
        public EngineHandle() : base(IntPtr.Zero, true) { }
        public override bool IsInvalid => handle == IntPtr.Zero;
        internal void Set(IntPtr p) { SetHandle(p); }
        protected override bool ReleaseHandle()
        {
            N.llmkv_engine_destroy(handle);
            return true;
        }
    }

    /// <summary>Base of handles that belong to an engine: keeps the engine handle alive
    /// (DangerousAddRef) until it is released itself.</summary>
    public abstract class ChildHandle : SafeHandle
    {
        private EngineHandle _engine;
        private bool _engineRef;

        protected ChildHandle() : base(IntPtr.Zero, true) { }
        public override bool IsInvalid => handle == IntPtr.Zero;

        /// <summary>Takes a reference on the engine; call before the native create.</summary>
        internal void Bind(EngineHandle engine)
        {
            _engine = engine;
            engine.DangerousAddRef(ref _engineRef);
        }

        /// <summary>Stores the created pointer, or gives the engine reference back when the
        /// create failed (p == 0).</summary>
        internal void Set(IntPtr p)
        {
            if (p != IntPtr.Zero) { SetHandle(p); return; }
            if (_engineRef) { _engineRef = false; _engine.DangerousRelease(); }
        }

        protected abstract void Destroy(IntPtr p);

        protected override bool ReleaseHandle()
        {
            Destroy(handle);
            if (_engineRef) { _engineRef = false; _engine.DangerousRelease(); }
            return true;
        }
    }

    public sealed class SessionHandle : ChildHandle
    {
        protected override void Destroy(IntPtr p) { N.llmkv_session_destroy(p); }
    }

    public sealed class PrefixHandle : ChildHandle
    {
        protected override void Destroy(IntPtr p) { N.llmkv_prefix_release(p); }
    }

    /// <summary>Holds a SafeHandle's reference for the length of a native call (a concurrent
    /// Dispose then waits for the call instead of freeing the object under it).
    /// Throws ObjectDisposedException for a disposed handle.</summary>
    internal struct Use : IDisposable
    {
        private readonly SafeHandle _h;
        private bool _added;
        public readonly IntPtr Ptr;

        public Use(SafeHandle h, string objectName)
        {
            _h = h;
            _added = false;
            if (h == null || h.IsClosed) throw new ObjectDisposedException(objectName);
            try { h.DangerousAddRef(ref _added); }
            catch (ObjectDisposedException) { throw new ObjectDisposedException(objectName); }
            Ptr = h.DangerousGetHandle();
        }

        public void Dispose()
        {
            if (_added) { _added = false; _h.DangerousRelease(); }
        }
    }
}
