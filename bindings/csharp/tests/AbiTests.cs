// AbiTests.cs - the raw layer against the header as the C compiler sees it: the output of
// bindings/abi/gen_layout.py (test.sh builds and runs it and passes the file in LLMKV_LAYOUT).
// Every struct, field offset and size, constant and LLMKV_API function of the header must be
// mirrored by Llmkv.Native, and nothing the binding declares may be missing from the header.
using System;
using System.Collections.Generic;
using System.IO;
using System.Linq;
using System.Reflection;
using System.Runtime.InteropServices;
using Llmkv;
using Llmkv.Native;
using NUnit.Framework;

namespace Llmkv.Tests
{
    [TestFixture]
    public class AbiTests
    {
        private List<string[]> _lines;

        [TestFixtureSetUp]
        public void Load()
        {
            var path = Environment.GetEnvironmentVariable("LLMKV_LAYOUT");
            // Not an Ignore: without the layout the ABI is unchecked, and that must not pass.
            if (string.IsNullOrEmpty(path) || !File.Exists(path))
                Assert.Fail("LLMKV_LAYOUT must name the output of bindings/abi/gen_layout.py's program (test.sh sets it); got '" + path + "'");
            _lines = File.ReadAllLines(path).Where(l => l.Length > 0).Select(l => l.Split('\t')).ToList();
            Assert.That(_lines.Count(l => l[0] == "struct"), Is.GreaterThan(0), "no struct lines in " + path);
            Assert.That(_lines.Count(l => l[0] == "func"), Is.GreaterThan(0), "no func lines in " + path);
        }

        private static readonly Assembly Asm = typeof(NativeMethods).Assembly;

        private static Type StructType(string name) => Asm.GetType("Llmkv.Native." + name);

        /// <summary>Unmanaged size of one field as the marshaller lays it out.</summary>
        private static int FieldSize(FieldInfo f)
        {
            if (f.FieldType.IsArray)
            {
                var ma = (MarshalAsAttribute)f.GetCustomAttributes(typeof(MarshalAsAttribute), false).Single();
                Assert.AreEqual(UnmanagedType.ByValArray, ma.Value, f.Name);
                return ma.SizeConst * Marshal.SizeOf(f.FieldType.GetElementType());
            }
            return Marshal.SizeOf(f.FieldType);
        }

        private static int FieldAlign(Type t)
        {
            if (t.IsArray) return FieldAlign(t.GetElementType());
            if (t.IsPrimitive || t == typeof(IntPtr) || t == typeof(UIntPtr)) return Marshal.SizeOf(t);
            return t.GetFields(BindingFlags.Public | BindingFlags.NonPublic | BindingFlags.Instance).Max(f => FieldAlign(f.FieldType));
        }

        [Test]
        public void EveryHeaderStructMatchesSizeAlignmentAndFields()
        {
            var problems = new List<string>();
            foreach (var s in _lines.Where(l => l[0] == "struct"))
            {
                string name = s[1];
                var t = StructType(name);
                if (t == null) { problems.Add("struct " + name + " is not declared in Llmkv.Native"); continue; }
                Assert.IsTrue(t.IsLayoutSequential, name + " must be LayoutKind.Sequential");
                int size = Marshal.SizeOf(t);
                if (size != int.Parse(s[2])) problems.Add(name + ": size " + size + ", header " + s[2]);
                int align = FieldAlign(t);
                if (align != int.Parse(s[3])) problems.Add(name + ": alignment " + align + ", header " + s[3]);
                var headerFields = _lines.Where(l => l[0] == "field" && l[1] == name).ToList();
                var csFields = t.GetFields(BindingFlags.Public | BindingFlags.NonPublic | BindingFlags.Instance);
                if (csFields.Length != headerFields.Count)
                    problems.Add(name + ": " + csFields.Length + " fields, header " + headerFields.Count);
                foreach (var f in headerFields)
                {
                    var fi = t.GetField(f[2]);
                    if (fi == null) { problems.Add(name + "." + f[2] + " missing"); continue; }
                    long off = Marshal.OffsetOf(t, f[2]).ToInt64();
                    if (off != long.Parse(f[3])) problems.Add(name + "." + f[2] + ": offset " + off + ", header " + f[3]);
                    int fs = FieldSize(fi);
                    if (fs != int.Parse(f[4])) problems.Add(name + "." + f[2] + ": size " + fs + ", header " + f[4]);
                }
            }
            Assert.IsEmpty(problems, string.Join("\n", problems));
        }

        [Test]
        public void NoStructBeyondTheHeader()
        {
            var header = new HashSet<string>(_lines.Where(l => l[0] == "struct").Select(l => l[1]));
            var extra = Asm.GetTypes().Where(t => t.Namespace == "Llmkv.Native" && t.IsValueType && !t.IsEnum && !header.Contains(t.Name))
                           .Select(t => t.Name).ToList();
            Assert.IsEmpty(extra, "structs the header does not have: " + string.Join(", ", extra));
        }

        private static Dictionary<string, long> BindingConstants() =>
            typeof(NativeMethods).GetFields(BindingFlags.Public | BindingFlags.Static)
                .Where(f => f.IsLiteral && f.Name.StartsWith("LLMKV_"))
                .ToDictionary(f => f.Name, f => Convert.ToInt64(f.GetRawConstantValue()));

        [Test]
        public void EveryHeaderConstantHasTheCValue()
        {
            var cs = BindingConstants();
            var problems = new List<string>();
            foreach (var c in _lines.Where(l => l[0] == "const"))
            {
                long v;
                if (!cs.TryGetValue(c[1], out v)) problems.Add(c[1] + " (= " + c[2] + ") is not declared");
                else if (v != long.Parse(c[2])) problems.Add(c[1] + " = " + v + ", header " + c[2]);
            }
            Assert.IsEmpty(problems, string.Join("\n", problems));
        }

        [Test]
        public void EveryBindingConstantIsInTheHeader()
        {
            var header = _lines.Where(l => l[0] == "const").ToDictionary(l => l[1], l => long.Parse(l[2]));
            var cs = BindingConstants();
            // The one derived constant the layout program does not print.
            Assert.AreEqual(header["LLMKV_VERSION_MAJOR"] * 10000 + header["LLMKV_VERSION_MINOR"] * 100 + header["LLMKV_VERSION_PATCH"],
                            cs["LLMKV_VERSION_NUMBER"]);
            var extra = cs.Keys.Where(k => k != "LLMKV_VERSION_NUMBER" && !header.ContainsKey(k)).ToList();
            Assert.IsEmpty(extra, "constants the header does not have: " + string.Join(", ", extra));
        }

        /// <summary>The idiomatic enums cover every value of their header family.</summary>
        [TestCase(typeof(Status), "LLMKV_ERR_", "LLMKV_OK")]
        [TestCase(typeof(LogLevel), "LLMKV_LOG_", null)]
        [TestCase(typeof(Backend), "LLMKV_BACKEND_", null)]
        [TestCase(typeof(KvDtype), "LLMKV_KV_", "LLMKV_KV_ROTATION_")]
        [TestCase(typeof(KvRotation), "LLMKV_KV_ROTATION_", null)]
        [TestCase(typeof(EngineFlags), "LLMKV_ENGINE_", null)]
        [TestCase(typeof(TokenizeFlags), "LLMKV_TOKENIZE_", null)]
        [TestCase(typeof(PrefixLoadFlags), "LLMKV_PREFIX_LOAD_", null)]
        [TestCase(typeof(GrammarKind), "LLMKV_GRAMMAR_", null)]
        [TestCase(typeof(SessionState), "LLMKV_SESSION_", null)]
        [TestCase(typeof(FinishReason), "LLMKV_FINISH_", null)]
        [TestCase(typeof(Tier), "LLMKV_TIER_", null)]
        [TestCase(typeof(EventKind), "LLMKV_EVENT_", null)]
        public void IdiomaticEnumCoversHeaderFamily(Type enumType, string prefix, string extraOrExcluded)
        {
            var family = _lines.Where(l => l[0] == "const" && l[1].StartsWith(prefix)).ToList();
            if (enumType == typeof(KvDtype)) family = family.Where(l => !l[1].StartsWith(extraOrExcluded)).ToList();
            else if (extraOrExcluded != null) family.AddRange(_lines.Where(l => l[0] == "const" && l[1] == extraOrExcluded));
            Assert.IsNotEmpty(family, prefix);
            var values = new HashSet<long>(Enum.GetValues(enumType).Cast<object>().Select(v => Convert.ToInt64(v)));
            var missing = family.Where(l => !values.Contains(long.Parse(l[2]))).Select(l => l[1]).ToList();
            Assert.IsEmpty(missing, enumType.Name + " lacks " + string.Join(", ", missing));
        }

        /// <summary>Entry point -> one of its imports (a few functions have two overloads).</summary>
        private static Dictionary<string, MethodInfo> Imports() =>
            typeof(NativeMethods).GetMethods(BindingFlags.Public | BindingFlags.NonPublic | BindingFlags.Static)
                .Where(m => (m.Attributes & MethodAttributes.PinvokeImpl) != 0)
                .GroupBy(m =>
                {
                    var a = (DllImportAttribute)m.GetCustomAttributes(typeof(DllImportAttribute), false).Single();
                    Assert.AreEqual(NativeMethods.Lib, a.Value, m.Name);
                    Assert.AreEqual(CallingConvention.Cdecl, a.CallingConvention, m.Name);
                    Assert.IsFalse(a.SetLastError, m.Name);
                    Assert.AreEqual(m.Name, a.EntryPoint ?? m.Name, "imports are named as their C function");
                    return a.EntryPoint ?? m.Name;
                })
                .ToDictionary(g => g.Key, g => g.First());

        [Test]
        public void EveryHeaderFunctionHasADllImport()
        {
            var imports = Imports();
            var missing = _lines.Where(l => l[0] == "func" && !imports.ContainsKey(l[1])).Select(l => l[1]).ToList();
            Assert.IsEmpty(missing, "no DllImport for: " + string.Join(", ", missing));
        }

        [Test]
        public void EveryDllImportIsAHeaderFunction()
        {
            var header = new HashSet<string>(_lines.Where(l => l[0] == "func").Select(l => l[1]));
            var extra = Imports().Keys.Where(k => !header.Contains(k)).ToList();
            Assert.IsEmpty(extra, "DllImports the header does not declare: " + string.Join(", ", extra));
        }

        /// <summary>Every import resolves in the loaded libllmkv (a library older than the header fails here).</summary>
        [Test]
        public void EveryDllImportResolvesInTheLoadedLibrary()
        {
            var unresolved = new List<string>();
            foreach (var kv in Imports())
            {
                try { Marshal.Prelink(kv.Value); }
                catch (EntryPointNotFoundException) { unresolved.Add(kv.Key); }
            }
            Assert.IsEmpty(unresolved, "not exported by the loaded library " + Library.VersionString + ": " + string.Join(", ", unresolved));
        }

        /// <summary>llmkv_*_params_init_sized writes exactly the size it is given (capped at the
        /// library's struct); the unsized llmkv_engine_params_init writes only the 0.3 struct
        /// (96 bytes: what programs built against older headers have), the unsized session init
        /// the 0.2-0.4 struct.</summary>
        [TestCase("llmkv_engine_params", false, 96)]
        [TestCase("llmkv_engine_params", true, -1)]
        [TestCase("llmkv_session_params", false, -1)]
        [TestCase("llmkv_session_params", true, -1)]
        public void ParamsInitWritesExactlyItsStruct(string name, bool sized, int expected)
        {
            int size = int.Parse(_lines.Single(l => l[0] == "struct" && l[1] == name)[2]);
            if (expected < 0) expected = size;
            IntPtr buf = Marshal.AllocHGlobal(1024);
            try
            {
                for (int i = 0; i < 1024; i++) Marshal.WriteByte(buf, i, 0xAB);
                if (name == "llmkv_engine_params")
                {
                    if (sized) NativeMethods.llmkv_engine_params_init_sized(buf, (UIntPtr)1024);
                    else NativeMethods.llmkv_engine_params_init(buf);
                }
                else
                {
                    if (sized) NativeMethods.llmkv_session_params_init_sized(buf, (UIntPtr)1024);
                    else NativeMethods.llmkv_session_params_init(buf);
                }
                Assert.AreEqual(expected, Marshal.ReadInt32(buf), "struct_size written by init");
                for (int i = expected; i < 1024; i++) Assert.AreEqual(0xAB, Marshal.ReadByte(buf, i), "init wrote byte " + i);
                if (sized)
                {   // and a smaller size than the struct: exactly that many bytes
                    for (int i = 0; i < 1024; i++) Marshal.WriteByte(buf, i, 0xAB);
                    if (name == "llmkv_engine_params") NativeMethods.llmkv_engine_params_init_sized(buf, (UIntPtr)40);
                    else NativeMethods.llmkv_session_params_init_sized(buf, (UIntPtr)40);
                    Assert.AreEqual(40, Marshal.ReadInt32(buf));
                    for (int i = 40; i < 1024; i++) Assert.AreEqual(0xAB, Marshal.ReadByte(buf, i), "sized init wrote byte " + i);
                }
            }
            finally { Marshal.FreeHGlobal(buf); }
        }

        [Test]
        public void ParamsDefaultsAreTheHeaders()
        {
            var ep = new llmkv_engine_params();
            NativeMethods.llmkv_engine_params_init_sized(ref ep, (UIntPtr)Marshal.SizeOf(typeof(llmkv_engine_params)));
            Assert.AreEqual(-1, ep.spin_us);
            Assert.AreEqual(0, ep.thread_priority);
            Assert.AreEqual(0u, ep.tp_size);
            Assert.AreEqual(IntPtr.Zero, ep.tp_transport);
            Assert.AreEqual(NativeMethods.LLMKV_ENGINE_PREFIX_CACHE, ep.flags & NativeMethods.LLMKV_ENGINE_PREFIX_CACHE);
            Assert.AreEqual(NativeMethods.LLMKV_KV_F16, ep.kv_dtype_k);
            var sp = new llmkv_session_params();
            NativeMethods.llmkv_session_params_init_sized(ref sp, (UIntPtr)Marshal.SizeOf(typeof(llmkv_session_params)));
            Assert.AreEqual((uint)Marshal.SizeOf(typeof(llmkv_session_params)), sp.struct_size);
            Assert.AreEqual(0f, sp.sampling.temperature);
            Assert.AreEqual(1f, sp.sampling.top_p);
            Assert.AreEqual(1f, sp.sampling.repeat_penalty);
            Assert.AreEqual(0u, sp.max_new_tokens);
        }

        [Test]
        public void LoadedLibraryIsTheHeadersVersionOrNewer()
        {
            Assert.AreEqual(Library.VersionString, string.Format("{0}.{1}.{2}", Library.Version / 10000, Library.Version / 100 % 100, Library.Version % 100));
            Assert.GreaterOrEqual(Library.Version, Library.BindingVersion,
                "the loaded library " + Library.VersionString + " is older than the header the binding mirrors");
        }
    }
}
