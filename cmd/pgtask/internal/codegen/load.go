package codegen

import (
	"cmp"
	"fmt"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/tools/go/packages"

	"github.com/pgtask/pgtask/runtime"
)

const runtimePath = "github.com/pgtask/pgtask/runtime"

// taskspecPath is the package generated code calls; users do not.
const taskspecPath = runtimePath + "/taskspec"

// task is one declared task, ready to render.
type task struct {
	Name     string // the Go type
	Pos      token.Position
	settings settings
	Group    *groupField
	// Limit is the field tagged task:"limit", whose value is the key the
	// declared limit counts jobs by; nil: the queue's own limit.
	Limit *groupField
	// Rate is the field tagged task:"rate", whose value is the key the
	// declared rate counts starts by; nil: the kind's own rate.
	Rate *groupField
	// Tenant is the field tagged task:"tenant", whose value is the job's
	// tenant in its fair queue; nil: tenant "" (or no fairness).
	Tenant *groupField
	// Unique are the fields tagged task:"unique", in declaration order: the
	// job's unique key is made of their values.
	Unique []string
	Result types.Type // nil unless the task embeds runtime.TaskWithResult[R]
	// Inputs are the fields of type runtime.Input[R], in declaration
	// order: a workflow step's parents whose results it reads.
	Inputs []string
}

// groupKind says how a group or limit key field becomes the text key.
type groupKind int

const (
	groupString   groupKind = iota // string(v)
	groupSigned                    // strconv.FormatInt(int64(v), 10)
	groupUnsigned                  // strconv.FormatUint(uint64(v), 10)
	groupStringer                  // v.String()
)

// groupField is a field whose value, as text, is a key: a group's, or a
// limit's.
type groupField struct {
	Name string
	Pos  token.Pos
	Kind groupKind
	// Nilable: a stringer field that can be nil (a pointer or an
	// interface), whose String method would panic on nil.
	Nilable bool
}

// Error is a problem in a task declaration, at a source position.
type Error struct {
	Pos token.Position
	Msg string
}

func (e Error) Error() string { return fmt.Sprintf("%s:%d: %s", e.Pos.Filename, e.Pos.Line, e.Msg) }

// CompileError reports a package the Go type checker refuses: its tasks
// cannot be read until it compiles. Positions are relative to the module's
// root.
type CompileError struct {
	Package string
	Errors  []string // each "file:line:col: message", as the compiler says it
}

func (e *CompileError) Error() string {
	return fmt.Sprintf("package %s does not compile:\n%s", e.Package, strings.Join(e.Errors, "\n"))
}

// compileErrors lists a package's errors, with their files relative to
// root. The go command's summary of the type errors, which has no
// position, is left out when the type errors themselves are there.
func compileErrors(root string, pkgErrs []packages.Error) []string {
	var positioned, other []string
	for _, e := range pkgErrs {
		if e.Pos == "" || e.Pos == "-" {
			other = append(other, e.Msg)
			continue
		}
		positioned = append(positioned, relativePos(root, e.Pos)+": "+e.Msg)
	}
	if len(positioned) > 0 {
		return positioned
	}
	return other
}

// relativePos rewrites the file of a "file:line:col" position relative to
// root.
func relativePos(root, pos string) string {
	file, rest := pos, ""
	for range 2 {
		i := strings.LastIndexByte(file, ':')
		if i < 0 || strings.Trim(file[i+1:], "0123456789") != "" || i == len(file)-1 {
			break
		}
		file, rest = file[:i], file[i:]+rest
	}
	return relativePath(root, file) + rest
}

// relativePath is path relative to root, or path itself when it has none.
func relativePath(root, path string) string {
	if !filepath.IsAbs(path) {
		return path
	}
	if rel, err := filepath.Rel(root, path); err == nil {
		return rel
	}
	return path
}

// Errors is every problem found in a package, in source order.
type Errors []Error

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// loaded is a type-checked package and its tasks.
type loaded struct {
	Path  string
	Name  string
	Tasks []task
	// Root is the directory positions are given relative to: the module's
	// root, or the package's directory outside a module.
	Root string
}

// load type-checks the package in dir, without the generated file (which may
// be stale or broken), and collects its tasks. It never runs the package's code.
func load(dir, outName string) (*loaded, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	cfg := &packages.Config{
		Mode: packages.NeedName | packages.NeedFiles | packages.NeedSyntax |
			packages.NeedTypes | packages.NeedTypesInfo | packages.NeedModule,
		Dir:   abs,
		Tests: false,
	}
	out := filepath.Join(abs, outName)
	if src, err := os.ReadFile(out); err == nil {
		// Type-check as if the generated file were empty: it is about to be
		// replaced, and a stale one must not stop generation.
		cfg.Overlay = map[string][]byte{out: []byte("package " + packageClause(src) + "\n")}
	}
	pkgs, err := packages.Load(cfg, ".")
	if err != nil {
		return nil, fmt.Errorf("load package in %s: %w", dir, err)
	}
	if len(pkgs) != 1 {
		return nil, fmt.Errorf("load package in %s: found %d packages", dir, len(pkgs))
	}
	pkg := pkgs[0]
	root := abs
	if pkg.Module != nil && pkg.Module.Dir != "" {
		root = pkg.Module.Dir
	}
	if len(pkg.Errors) > 0 {
		return nil, &CompileError{Package: pkg.PkgPath, Errors: compileErrors(root, pkg.Errors)}
	}
	l := &loaded{Path: pkg.PkgPath, Name: pkg.Name, Root: root}
	var errs Errors
	rules := newRuleChecker()
	for _, file := range pkg.Syntax {
		for _, decl := range file.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok || gen.Tok != token.TYPE {
				continue
			}
			for _, spec := range gen.Specs {
				ts := spec.(*ast.TypeSpec)
				t, found, es := inspect(pkg, ts, rules)
				errs = append(errs, es...)
				if found && len(es) == 0 {
					l.Tasks = append(l.Tasks, t)
				}
			}
		}
	}
	errs = append(errs, duplicateKinds(l.Tasks)...)
	errs = append(errs, mixedFairness(l.Tasks)...)
	errs = append(errs, nameClashes(pkg, testDeclarations(abs, pkg.Name), l.Tasks)...)
	if len(errs) > 0 {
		sort.SliceStable(errs, func(i, j int) bool {
			a, b := errs[i].Pos, errs[j].Pos
			return a.Filename < b.Filename || a.Filename == b.Filename && a.Line < b.Line
		})
		return nil, relative(root, errs)
	}
	if len(l.Tasks) == 0 {
		return nil, fmt.Errorf("package %s declares no tasks: a task is a struct that embeds %s.Task", pkg.PkgPath, runtimePath)
	}
	sort.Slice(l.Tasks, func(i, j int) bool { return l.Tasks[i].Name < l.Tasks[j].Name })
	return l, nil
}

// packageClause returns the package name in a Go file, or "main" when unreadable.
func packageClause(src []byte) string {
	for _, line := range strings.Split(string(src), "\n") {
		if name, ok := strings.CutPrefix(strings.TrimSpace(line), "package "); ok {
			return strings.TrimSpace(name)
		}
	}
	return "main"
}

// inspect reports whether ts declares a task, and what is wrong with it.
func inspect(pkg *packages.Package, ts *ast.TypeSpec, rules *ruleChecker) (task, bool, Errors) {
	pos := func(p token.Pos) token.Position { return pkg.Fset.Position(p) }
	if _, ok := ts.Type.(*ast.StructType); !ok {
		return task{}, false, nil
	}
	obj := pkg.TypesInfo.Defs[ts.Name]
	if obj == nil {
		return task{}, false, nil
	}
	strct, ok := obj.Type().Underlying().(*types.Struct)
	if !ok {
		return task{}, false, nil
	}

	t := task{Name: ts.Name.Name, Pos: pos(ts.Pos())}
	var errs Errors
	fail := func(p token.Pos, format string, args ...any) {
		errs = append(errs, Error{Pos: pos(p), Msg: fmt.Sprintf(format, args...)})
	}
	marker := -1
	for i := range strct.NumFields() {
		f := strct.Field(i)
		if !f.Embedded() {
			continue
		}
		name, ptr := markerName(f.Type())
		if name == "" {
			continue
		}
		if marker >= 0 {
			fail(f.Pos(), "%s embeds more than one task marker", ts.Name.Name)
			continue
		}
		marker = i
		if ptr {
			fail(f.Pos(), "embed runtime.%s by value, not as a pointer", name)
		}
		if name == "TaskWithResult" {
			t.Result = f.Type().(*types.Named).TypeArgs().At(0)
		}
	}
	if marker < 0 {
		return task{}, false, nil
	}
	if !ts.Name.IsExported() {
		fail(ts.Pos(), "task type %s is unexported; the generated Enqueue%s and Handle%s must be exported, so export the type",
			ts.Name.Name, upperFirst(ts.Name.Name), upperFirst(ts.Name.Name))
	}
	if ts.TypeParams != nil {
		fail(ts.Pos(), "task type %s has type parameters; tasks must be concrete types", ts.Name.Name)
	}

	settings, tagErrs := parseTaskTag(reflect.StructTag(strct.Tag(marker)).Get("task"), ts.Name.Name)
	for _, err := range tagErrs {
		fail(strct.Field(marker).Pos(), "%s: %v", ts.Name.Name, err)
	}
	t.settings = settings
	if t.Result != nil {
		if _, err := typeCode(t.Result); err != nil {
			fail(strct.Field(marker).Pos(), "%s: result type %v", ts.Name.Name, err)
		}
	}
	errs = append(errs, rules.check(pkg, ts.Name.Name, strct, marker)...)

	for i := range strct.NumFields() {
		if i == marker {
			continue
		}
		f := strct.Field(i)
		if !isInput(f.Type()) && holdsInput(f.Type(), map[types.Type]bool{}) {
			fail(f.Pos(), "field %s: a step's input is a field of the task of type runtime.Input[R]; one in a slice, pointer, map or nested struct is not supported (its step would wait for no parent)", f.Name())
		}
		if isInput(f.Type()) {
			switch {
			case f.Embedded():
				fail(f.Pos(), "%s embeds runtime.Input; declare it as a named field", ts.Name.Name)
			case !f.Exported():
				fail(f.Pos(), "field %s is unexported, so it is not in the JSON payload; export it", f.Name())
			default:
				t.Inputs = append(t.Inputs, f.Name())
			}
		}
		tag, has := reflect.StructTag(strct.Tag(i)).Lookup("task")
		if !has {
			continue
		}
		roles, ok := fieldTag(tag)
		if !ok {
			fail(f.Pos(), `field %s: task tag %q: on a field only group, limit, rate, tenant and unique are allowed, each at most once, joined by commas (task:"group,unique")`, f.Name(), tag)
			continue
		}
		if !f.Exported() {
			fail(f.Pos(), "field %s is unexported, so it is not in the JSON payload; export it", f.Name())
			continue
		}
		if roles.unique {
			if !encodable(f.Type()) {
				fail(f.Pos(), "unique field %s has type %s, which JSON cannot encode; a unique key is made of the fields' JSON",
					f.Name(), types.TypeString(f.Type(), types.RelativeTo(pkg.Types)))
			} else {
				t.Unique = append(t.Unique, f.Name())
			}
		}
		key := func(role string, into **groupField) {
			if *into != nil {
				fail(f.Pos(), "field %s: %s already has a %s field, %s; a task has at most one", f.Name(), ts.Name.Name, role, (*into).Name)
				return
			}
			kind, ok := groupKindOf(f.Type())
			if !ok {
				fail(f.Pos(), "%s field %s has type %s; want a string or integer type, or a type with a String() string method",
					role, f.Name(), types.TypeString(f.Type(), types.RelativeTo(pkg.Types)))
				return
			}
			*into = &groupField{Name: f.Name(), Pos: f.Pos(), Kind: kind, Nilable: kind == groupStringer && nilable(f.Type())}
		}
		if roles.group {
			key("group", &t.Group)
		}
		if roles.limit {
			key("limit", &t.Limit)
		}
		if roles.rate {
			key("rate", &t.Rate)
		}
		if roles.tenant {
			key("tenant", &t.Tenant)
		}
	}
	// A job has a group, a concurrency limit or a rate, at most one of
	// them; the runtime refuses the others too.
	switch {
	case settings.RateBurst > 0 && settings.Rate == 0:
		fail(strct.Field(marker).Pos(), "%s: burst=%d without a rate; add rate=N/PERIOD to its task tag", ts.Name.Name, settings.RateBurst)
	case t.Rate != nil && settings.Rate == 0:
		fail(t.Rate.Pos, "field %s: task:\"rate\" makes the key of %s's rate, but it declares none; add rate=N/PERIOD to its task tag",
			t.Rate.Name, ts.Name.Name)
	case settings.Rate > 0 && (t.Group != nil || settings.Limit > 0):
		with := "limit=" + strconv.Itoa(settings.Limit)
		if t.Group != nil {
			with = "group field " + t.Group.Name
		}
		fail(strct.Field(marker).Pos(), "%s: rate=%d/%s with %s: a task has a group, a concurrency limit or a rate, at most one (docs/rate-limits.md)",
			ts.Name.Name, settings.Rate, settings.RatePer, with)
	}
	// A group runs one job at a time already, and the runtime refuses a
	// grouped job with a limit: say so here, where the declaration is.
	switch {
	case t.Group != nil && t.Limit != nil && t.Limit.Name == t.Group.Name:
		fail(t.Limit.Pos, "field %s is both the group key and the limit key; a grouped task cannot have a limit, its group runs one job at a time already",
			t.Limit.Name)
	case t.Group != nil && t.Limit != nil:
		fail(t.Limit.Pos, "field %s: %s has a group field, %s, so it cannot have a limit key; its group runs one job at a time already",
			t.Limit.Name, ts.Name.Name, t.Group.Name)
	case t.Group != nil && settings.Limit > 0:
		fail(strct.Field(marker).Pos(), "%s: limit=%d with group field %s: a grouped task cannot have a limit; its group runs one job at a time already",
			ts.Name.Name, settings.Limit, t.Group.Name)
	case t.Limit != nil && settings.Limit == 0:
		fail(t.Limit.Pos, "field %s: task:\"limit\" makes the key of %s's limit, but it declares none; add limit=N to its task tag",
			t.Limit.Name, ts.Name.Name)
	case settings.LimitStrategy != "" && settings.Limit == 0:
		fail(strct.Field(marker).Pos(), "%s: on_limit=%s without a limit; add limit=N to its task tag",
			ts.Name.Name, settings.LimitStrategy)
	}
	switch {
	case len(t.Unique) > 0 && settings.Unique:
		fail(strct.Field(marker).Pos(), "%s: unique=payload and task:\"unique\" fields both make the unique key; use one", ts.Name.Name)
	case !settings.Unique && len(t.Unique) == 0 && (settings.UniqueWindow != 0 || len(settings.UniqueStatuses) > 0):
		fail(strct.Field(marker).Pos(), "%s: options unique_window and unique_statuses need unique=payload or task:\"unique\" fields", ts.Name.Name)
	case (settings.Unique || len(t.Unique) > 0) && len(t.Inputs) > 0:
		// It would have no generated function to enqueue it with.
		drop := "unique=payload"
		if !settings.Unique {
			drop = `task:"unique" from ` + strings.Join(t.Unique, ", ")
		}
		fail(strct.Field(marker).Pos(), "%s: its runtime.Input fields make it a workflow's step, enqueued only with Add%s, "+
			"and a workflow's steps cannot be unique; drop %s", ts.Name.Name, ts.Name.Name, drop)
	}
	return t, true, errs
}

// fieldRoles are what a field's task tag makes of it.
type fieldRoles struct {
	group  bool // its value is the FIFO group key
	limit  bool // its value is the key the task's limit counts by
	rate   bool // its value is the key the task's rate counts by
	tenant bool // its value is the job's tenant in its fair queue
	unique bool // its value is part of the unique key
}

// fieldTag reads a field's task tag: "group", "limit", "rate", "tenant", "unique", or some of
// them joined by commas, each at most once.
func fieldTag(tag string) (roles fieldRoles, ok bool) {
	for _, part := range strings.Split(tag, ",") {
		var role *bool
		switch strings.TrimSpace(part) {
		case "group":
			role = &roles.group
		case "limit":
			role = &roles.limit
		case "rate":
			role = &roles.rate
		case "tenant":
			role = &roles.tenant
		case "unique":
			role = &roles.unique
		default:
			return fieldRoles{}, false
		}
		if *role {
			return fieldRoles{}, false
		}
		*role = true
	}
	return roles, true
}

// encodable reports whether encoding/json can encode a value of typ: not a
// channel, function or complex number, nor made of one.
func encodable(typ types.Type) bool {
	return encodableSeen(typ, map[types.Type]bool{})
}

func encodableSeen(typ types.Type, seen map[types.Type]bool) bool {
	if seen[typ] {
		return true
	}
	seen[typ] = true
	switch u := typ.Underlying().(type) {
	case *types.Chan, *types.Signature:
		return false
	case *types.Basic:
		return u.Info()&types.IsComplex == 0 && u.Kind() != types.UnsafePointer
	case *types.Pointer:
		return encodableSeen(u.Elem(), seen)
	case *types.Slice:
		return encodableSeen(u.Elem(), seen)
	case *types.Array:
		return encodableSeen(u.Elem(), seen)
	case *types.Map:
		return mapKeyEncodable(u.Key()) && encodableSeen(u.Elem(), seen)
	case *types.Struct:
		for i := range u.NumFields() {
			if f := u.Field(i); f.Exported() && reflect.StructTag(u.Tag(i)).Get("json") != "-" && !encodableSeen(f.Type(), seen) {
				return false
			}
		}
	}
	return true
}

// mapKeyEncodable reports whether encoding/json can encode a map key of
// typ: a string or integer kind, or a type with a MarshalText method.
func mapKeyEncodable(typ types.Type) bool {
	if b, ok := typ.Underlying().(*types.Basic); ok && b.Info()&(types.IsString|types.IsInteger) != 0 {
		return true
	}
	for _, t := range []types.Type{typ, types.NewPointer(typ)} {
		if obj, _, _ := types.LookupFieldOrMethod(t, true, nil, "MarshalText"); obj != nil {
			if _, isFunc := obj.(*types.Func); isFunc {
				return true
			}
		}
	}
	return false
}

// isInput reports whether typ is runtime.Input[R] (a workflow step's
// input).
func isInput(typ types.Type) bool {
	named, ok := typ.(*types.Named)
	if !ok {
		return false
	}
	obj := named.Origin().Obj()
	return obj.Pkg() != nil && obj.Pkg().Path() == runtimePath && obj.Name() == "Input"
}

// holdsInput reports whether typ has a runtime.Input[R] inside it: as
// the element of a slice, array, map or pointer, or a field of a struct.
func holdsInput(typ types.Type, seen map[types.Type]bool) bool {
	if isInput(typ) {
		return true
	}
	if seen[typ] {
		return false
	}
	seen[typ] = true
	switch u := typ.Underlying().(type) {
	case *types.Pointer:
		return holdsInput(u.Elem(), seen)
	case *types.Slice:
		return holdsInput(u.Elem(), seen)
	case *types.Array:
		return holdsInput(u.Elem(), seen)
	case *types.Map:
		return holdsInput(u.Key(), seen) || holdsInput(u.Elem(), seen)
	case *types.Struct:
		for i := range u.NumFields() {
			if holdsInput(u.Field(i).Type(), seen) {
				return true
			}
		}
	}
	return false
}

// markerName returns "Task" or "TaskWithResult" when typ is one of the
// runtime's markers (ptr: as a pointer), or "" otherwise.
func markerName(typ types.Type) (name string, ptr bool) {
	if p, ok := typ.(*types.Pointer); ok {
		typ, ptr = p.Elem(), true
	}
	named, ok := typ.(*types.Named)
	if !ok {
		return "", false
	}
	obj := named.Origin().Obj()
	if obj.Pkg() == nil || obj.Pkg().Path() != runtimePath {
		return "", false
	}
	switch obj.Name() {
	case "Task", "TaskWithResult":
		return obj.Name(), ptr
	}
	return "", false
}

func groupKindOf(typ types.Type) (groupKind, bool) {
	if b, ok := typ.Underlying().(*types.Basic); ok {
		switch {
		case b.Info()&types.IsString != 0:
			return groupString, true
		case b.Info()&types.IsInteger != 0 && b.Info()&types.IsUnsigned != 0:
			return groupUnsigned, true
		case b.Info()&types.IsInteger != 0:
			return groupSigned, true
		}
	}
	if hasStringMethod(typ) {
		return groupStringer, true
	}
	return 0, false
}

func nilable(typ types.Type) bool {
	switch typ.Underlying().(type) {
	case *types.Pointer, *types.Interface, *types.Map, *types.Slice, *types.Signature, *types.Chan:
		return true
	}
	return false
}

func hasStringMethod(typ types.Type) bool {
	ms := types.NewMethodSet(typ)
	for i := range ms.Len() {
		fn, ok := ms.At(i).Obj().(*types.Func)
		if !ok || fn.Name() != "String" {
			continue
		}
		sig := fn.Type().(*types.Signature)
		if sig.Params().Len() == 0 && sig.Results().Len() == 1 && types.Identical(sig.Results().At(0).Type(), types.Typ[types.String]) {
			return true
		}
	}
	return false
}

func duplicateKinds(tasks []task) Errors {
	var errs Errors
	first := map[string]task{}
	for _, t := range tasks {
		if prev, dup := first[t.settings.Kind]; dup {
			errs = append(errs, Error{Pos: t.Pos, Msg: fmt.Sprintf("kind %q of %s is already the kind of %s (%s:%d); kinds must be unique",
				t.settings.Kind, t.Name, prev.Name, filepath.Base(prev.Pos.Filename), prev.Pos.Line)})
			continue
		}
		first[t.settings.Kind] = t
	}
	return errs
}

// nameClashes refuses a task whose generated names are declared already:
// by the package's own code, or by the generated code of another task
// (Enqueue<T>Many of Foo is Enqueue<T> of FooMany). The generated file
// would not compile, and its compiler errors would not say which
// declaration to change.
//
// The package's _test.go files of the same package (not those of its
// external _test package) are compiled with the generated file by go test,
// so their declarations are in testNames and count too.
func nameClashes(pkg *packages.Package, testNames map[string]token.Position, tasks []task) Errors {
	var errs Errors
	type owner struct {
		task task
		what string
	}
	taken := map[string]owner{}
	scope := pkg.Types.Scope()
	for _, t := range tasks {
		for _, n := range generatedNames(t) {
			if obj := scope.Lookup(n.Name); obj != nil {
				at := pkg.Fset.Position(obj.Pos())
				errs = append(errs, Error{Pos: t.Pos, Msg: fmt.Sprintf("%s: its generated %s, %s, is already declared (%s:%d); rename the task or that declaration",
					t.Name, n.What, n.Name, filepath.Base(at.Filename), at.Line)})
				continue
			}
			if at, ok := testNames[n.Name]; ok {
				errs = append(errs, Error{Pos: t.Pos, Msg: fmt.Sprintf("%s: its generated %s, %s, is already declared (%s:%d); rename the task or that declaration",
					t.Name, n.What, n.Name, filepath.Base(at.Filename), at.Line)})
				continue
			}
			if prev, ok := taken[n.Name]; ok {
				errs = append(errs, Error{Pos: t.Pos, Msg: fmt.Sprintf("%s: its generated %s, %s, is also the %s of %s (%s:%d); rename one of the tasks",
					t.Name, n.What, n.Name, prev.what, prev.task.Name, filepath.Base(prev.task.Pos.Filename), prev.task.Pos.Line)})
				continue
			}
			taken[n.Name] = owner{t, n.What}
		}
	}
	return errs
}

// testDeclarations returns the package-level names that the _test.go files
// in dir of package name declare, each with where. Those files are read
// for their declarations only, not type-checked: they often call the
// generated functions that are about to be written. Files the build
// constraints leave out, of another package (name_test) or that do not
// parse are skipped; the compiler speaks for them.
func testDeclarations(dir, name string) map[string]token.Position {
	paths, _ := filepath.Glob(filepath.Join(dir, "*_test.go"))
	names := map[string]token.Position{}
	fset := token.NewFileSet()
	for _, path := range paths {
		if ok, err := build.Default.MatchFile(dir, filepath.Base(path)); err != nil || !ok {
			continue
		}
		file, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil || file.Name.Name != name {
			continue
		}
		add := func(id *ast.Ident) {
			if id.Name == "_" || id.Name == "init" {
				return
			}
			if _, ok := names[id.Name]; !ok {
				names[id.Name] = fset.Position(id.Pos())
			}
		}
		for _, decl := range file.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					add(d.Name)
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch sp := spec.(type) {
					case *ast.ValueSpec:
						for _, id := range sp.Names {
							add(id)
						}
					case *ast.TypeSpec:
						add(sp.Name)
					}
				}
			}
		}
	}
	return names
}

// fair reports whether t makes its queue fair.
func (t task) fair() bool { return t.settings.Fair || t.Tenant != nil }

// mixedFairness refuses a task of a queue that another task of the package
// makes fair but that does not say so itself: a fair queue's jobs all take
// turns, those of a task without a tenant as tenant "", and its
// declaration should show it.
func mixedFairness(tasks []task) Errors {
	var errs Errors
	fairBy := map[string]task{}
	for _, t := range tasks {
		if _, ok := fairBy[t.settings.Queue]; !ok && t.fair() {
			fairBy[t.settings.Queue] = t
		}
	}
	for _, t := range tasks {
		if by, ok := fairBy[t.settings.Queue]; ok && !t.fair() {
			queue := cmp.Or(t.settings.Queue, runtime.DefaultQueue)
			errs = append(errs, Error{Pos: t.Pos, Msg: fmt.Sprintf("%s: queue %s is fair (%s, %s:%d, takes turns by tenant), so its jobs take turns too; add fair=on to its task tag, or a field tagged task:\"tenant\"",
				t.Name, queue, by.Name, filepath.Base(by.Pos.Filename), by.Pos.Line)})
		}
	}
	return errs
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
