package raw

import (
	"bufio"
	"bytes"
	"go/ast"
	"go/constant"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

// The Go mirror of every struct of the header, by the mirror's name.
var mirrors = map[string]reflect.Type{
	"TpTransport":   reflect.TypeOf(TpTransport{}),
	"EngineParams":  reflect.TypeOf(EngineParams{}),
	"EngineInfo":    reflect.TypeOf(EngineInfo{}),
	"Stats":         reflect.TypeOf(Stats{}),
	"ChatMessage":   reflect.TypeOf(ChatMessage{}),
	"Sampling":      reflect.TypeOf(Sampling{}),
	"LogitBias":     reflect.TypeOf(LogitBias{}),
	"SessionParams": reflect.TypeOf(SessionParams{}),
	"SessionInfo":   reflect.TypeOf(SessionInfo{}),
	"Event":         reflect.TypeOf(Event{}),
}

// camel turns a C name into the binding's Go name: "llmkv_engine_create" -> "EngineCreate",
// "kv_dtype_k" -> "KvDtypeK".
func camel(c string) string {
	c = strings.TrimPrefix(c, "llmkv_")
	var b strings.Builder
	for _, part := range strings.Split(c, "_") {
		if part == "" {
			continue
		}
		b.WriteString(strings.ToUpper(part[:1]) + part[1:])
	}
	return b.String()
}

type cLayout struct {
	structs map[string][2]uintptr  // size, align
	fields  map[string][][3]string // struct -> [field, offset, size] in order
	consts  map[string]int64
	funcs   []string
}

// layout runs bindings/abi/gen_layout.py on the header and the C program it writes.
func layout(t *testing.T) *cLayout {
	t.Helper()
	inc := os.Getenv("LLMKV_INCLUDE_DIR")
	if inc == "" {
		inc = filepath.Join("..", "..", "..", "include")
	}
	header := filepath.Join(inc, "llmkv.h")
	if _, err := os.Stat(header); err != nil {
		t.Fatalf("the ABI check needs the header: %v (set LLMKV_INCLUDE_DIR)", err)
	}
	gen := filepath.Join("..", "..", "abi", "gen_layout.py")
	dir := t.TempDir()
	src, err := exec.Command("python3", gen, header).Output()
	if err != nil {
		t.Fatalf("python3 %s %s: %v", gen, header, err)
	}
	cfile := filepath.Join(dir, "layout.c")
	if err := os.WriteFile(cfile, src, 0o644); err != nil {
		t.Fatal(err)
	}
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	bin := filepath.Join(dir, "layout")
	if out, err := exec.Command(cc, "-std=c11", "-I", inc, cfile, "-o", bin).CombinedOutput(); err != nil {
		t.Fatalf("%s layout.c: %v\n%s", cc, err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatalf("layout: %v", err)
	}
	l := &cLayout{structs: map[string][2]uintptr{}, fields: map[string][][3]string{}, consts: map[string]int64{}}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		switch f[0] {
		case "struct":
			size, _ := strconv.ParseUint(f[2], 10, 64)
			align, _ := strconv.ParseUint(f[3], 10, 64)
			l.structs[f[1]] = [2]uintptr{uintptr(size), uintptr(align)}
		case "field":
			l.fields[f[1]] = append(l.fields[f[1]], [3]string{f[2], f[3], f[4]})
		case "const":
			v, err := strconv.ParseInt(f[2], 10, 64)
			if err != nil {
				t.Fatalf("bad const line %q", sc.Text())
			}
			l.consts[f[1]] = v
		case "func":
			l.funcs = append(l.funcs, f[1])
		default:
			t.Fatalf("unexpected layout line %q", sc.Text())
		}
	}
	if len(l.structs) == 0 || len(l.consts) == 0 || len(l.funcs) == 0 {
		t.Fatalf("the layout program printed nothing useful:\n%s", out)
	}
	return l
}

func TestABIStructs(t *testing.T) {
	l := layout(t)
	seen := map[string]bool{}
	for cname, sa := range l.structs {
		gname := camel(cname)
		seen[gname] = true
		rt, ok := mirrors[gname]
		if !ok {
			t.Errorf("struct %s of the header has no Go mirror %s in package raw", cname, gname)
			continue
		}
		if rt.Size() != sa[0] || uintptr(rt.Align()) != sa[1] {
			t.Errorf("%s: Go size/align %d/%d, C %d/%d", cname, rt.Size(), rt.Align(), sa[0], sa[1])
		}
		cf := l.fields[cname]
		if rt.NumField() != len(cf) {
			t.Errorf("%s: Go mirror has %d fields, C has %d", cname, rt.NumField(), len(cf))
		}
		for i, f := range cf {
			gf, ok := rt.FieldByName(camel(f[0]))
			if !ok {
				t.Errorf("%s.%s: no field %s in Go mirror %s", cname, f[0], camel(f[0]), gname)
				continue
			}
			off, _ := strconv.ParseUint(f[1], 10, 64)
			size, _ := strconv.ParseUint(f[2], 10, 64)
			if gf.Offset != uintptr(off) || gf.Type.Size() != uintptr(size) {
				t.Errorf("%s.%s: Go offset/size %d/%d, C %d/%d", cname, f[0], gf.Offset, gf.Type.Size(), off, size)
			}
			if len(gf.Index) != 1 || gf.Index[0] != i {
				t.Errorf("%s.%s: Go field %s is not field %d", cname, f[0], gf.Name, i)
			}
		}
	}
	for g := range mirrors {
		if !seen[g] {
			t.Errorf("Go mirror %s has no struct in the header", g)
		}
	}
}

// The constants declared in consts.go, evaluated by go/types.
func declaredConsts(t *testing.T) map[string]int64 {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "consts.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	conf := types.Config{Importer: importer.Default()}
	pkg, err := conf.Check("raw", fset, []*ast.File{f}, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, name := range pkg.Scope().Names() {
		c, ok := pkg.Scope().Lookup(name).(*types.Const)
		if !ok {
			continue
		}
		v, exact := constant.Int64Val(c.Val())
		if !exact {
			t.Fatalf("constant %s is not an integer", name)
		}
		out[name] = v
	}
	return out
}

func TestABIConstants(t *testing.T) {
	l := layout(t)
	decl := declaredConsts(t)
	for name, v := range l.consts {
		gv, ok := decl[name]
		if !ok {
			t.Errorf("constant %s = %d of the header is not declared in package raw", name, v)
		} else if gv != v {
			t.Errorf("constant %s: Go %d, C %d", name, gv, v)
		}
	}
	for name := range decl {
		if _, ok := l.consts[name]; !ok {
			t.Errorf("package raw declares %s, which the header does not define", name)
		}
	}
	// The typed statuses of the idiomatic layer are checked in package llmkv's tests.
}

func TestABIFunctions(t *testing.T) {
	l := layout(t)
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	funcs := map[string]*ast.FuncDecl{}
	for _, p := range pkgs {
		for _, f := range p.Files {
			for _, d := range f.Decls {
				if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil && fd.Name.IsExported() {
					funcs[fd.Name.Name] = fd
				}
			}
		}
	}
	if len(l.funcs) < 40 {
		t.Fatalf("the header lists only %d functions", len(l.funcs))
	}
	for _, c := range l.funcs {
		g := camel(c)
		if funcs[g] == nil {
			t.Errorf("function %s of the header has no Go function %s in package raw", c, g)
		}
	}
}

// A mirror and the library agree at run time too: EngineParamsInitSized fills the 0.5 size
// and the documented defaults through the Go mirror; the unsized EngineParamsInit fills only
// the 0.3 struct (what programs built against older headers have).
func TestParamsInitThroughMirror(t *testing.T) {
	var old EngineParams
	old.SpinUs, old.ThreadPriority = 77, 77
	EngineParamsInit(&old)
	if old.StructSize != 96 || old.SpinUs != 77 || old.ThreadPriority != 77 {
		t.Errorf("unsized engine_params_init wrote past the 0.3 struct: struct_size %d spin_us %d", old.StructSize, old.SpinUs)
	}
	var ep EngineParams
	EngineParamsInitSized(&ep, unsafe.Sizeof(ep))
	if uintptr(ep.StructSize) != reflect.TypeOf(ep).Size() {
		t.Errorf("engine_params_init struct_size %d, Go mirror %d", ep.StructSize, reflect.TypeOf(ep).Size())
	}
	if ep.SpinUs != -1 || ep.ThreadPriority != 0 || ep.Flags&LLMKV_ENGINE_PREFIX_CACHE == 0 || ep.TpSize != 0 || ep.TpTransport != nil {
		t.Errorf("engine defaults through the mirror: spin_us %d thread_priority %d flags %#x tp_size %d tp_transport %p",
			ep.SpinUs, ep.ThreadPriority, ep.Flags, ep.TpSize, ep.TpTransport)
	}
	// The 0.4 size (ending at thread_priority) is filled as such: the 0.5 fields stay untouched.
	var v4 EngineParams
	v4.TpSize = 77
	EngineParamsInitSized(&v4, unsafe.Offsetof(v4.TpSize))
	if v4.StructSize != 104 || v4.SpinUs != -1 || v4.TpSize != 77 {
		t.Errorf("engine_params_init_sized(104): struct_size %d spin_us %d tp_size %d", v4.StructSize, v4.SpinUs, v4.TpSize)
	}
	var sp SessionParams
	SessionParamsInitSized(&sp, unsafe.Sizeof(sp))
	if uintptr(sp.StructSize) != reflect.TypeOf(sp).Size() || sp.Sampling.TopP != 1 || sp.Sampling.RepeatPenalty != 1 {
		t.Errorf("session defaults through the mirror: %+v", sp)
	}
	if Version()/100 != LLMKV_VERSION_MAJOR*100+LLMKV_VERSION_MINOR {
		t.Errorf("library version %d (%s), binding mirrors %d.%d", Version(), VersionString(), LLMKV_VERSION_MAJOR, LLMKV_VERSION_MINOR)
	}
}
