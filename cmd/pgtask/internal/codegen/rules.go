package codegen

import (
	"fmt"
	"go/types"
	"reflect"
	"strings"

	"github.com/go-playground/validator/v10"
	"golang.org/x/tools/go/packages"
)

// ruleChecker checks validate tags with the validator's own parser, as
// runtime.Validate will read them, so a mistake such as "emial" stops
// generation instead of failing every enqueue. It parses tags only: it
// never sees a value of the package's types, so no code of the package runs.
type ruleChecker struct {
	v *validator.Validate
	// seen holds the struct types checked already: a type used by several
	// tasks, or by itself, is reported once.
	seen map[types.Type]bool
}

func newRuleChecker() *ruleChecker {
	// Configured as runtime.Validate's validator is; it registers no rules
	// of its own, so the rules it knows are the library's.
	return &ruleChecker{v: validator.New(validator.WithRequiredStructEnabled()), seen: map[types.Type]bool{}}
}

// check reports the bad validate tags of a task's struct (skipping its
// marker field) and of the struct types of this package it holds, which
// the validator walks into.
func (c *ruleChecker) check(pkg *packages.Package, name string, strct *types.Struct, marker int) Errors {
	var errs Errors
	c.checkStruct(pkg, name, strct, marker, &errs)
	return errs
}

func (c *ruleChecker) checkStruct(pkg *packages.Package, name string, strct *types.Struct, skip int, errs *Errors) {
	for i := range strct.NumFields() {
		f := strct.Field(i)
		if i == skip || !f.Exported() && !f.Embedded() {
			continue // the validator skips unexported fields
		}
		tag := reflect.StructTag(strct.Tag(i)).Get("validate")
		if tag != "" && tag != "-" {
			if problem := c.problem(tag); problem != "" {
				*errs = append(*errs, Error{Pos: pkg.Fset.Position(f.Pos()),
					Msg: fmt.Sprintf("%s.%s: validate:%q: %s", name, f.Name(), tag, problem)})
			}
		}
		if tag != "-" {
			c.walk(pkg, name+"."+f.Name(), f.Type(), errs)
		}
	}
}

// walk checks the struct types typ is made of that this package declares
// (or spells out in place).
func (c *ruleChecker) walk(pkg *packages.Package, name string, typ types.Type, errs *Errors) {
	for {
		switch t := types.Unalias(typ).(type) {
		case *types.Pointer:
			typ = t.Elem()
			continue
		case *types.Slice:
			typ = t.Elem()
			continue
		case *types.Array:
			typ = t.Elem()
			continue
		case *types.Map:
			c.walk(pkg, name, t.Key(), errs)
			typ = t.Elem()
			continue
		}
		break
	}
	typ = types.Unalias(typ)
	if c.seen[typ] {
		return
	}
	switch t := typ.(type) {
	case *types.Named:
		obj := t.Obj()
		if obj.Pkg() != pkg.Types {
			return // not the package's to fix
		}
		c.seen[typ] = true
		strct, ok := t.Underlying().(*types.Struct)
		if !ok {
			c.walk(pkg, obj.Name(), t.Underlying(), errs) // type Addresses []Address
			return
		}
		c.checkStruct(pkg, obj.Name(), strct, -1, errs)
	case *types.Struct:
		c.seen[typ] = true
		c.checkStruct(pkg, name, t, -1, errs)
	}
}

// problem says what is wrong with a validate tag, or "" when the validator
// reads it. Every unknown rule of the tag is named.
func (c *ruleChecker) problem(tag string) string {
	msg := parse(c.v, tag)
	if msg == "" {
		return ""
	}
	var unknown []string
	v := c.v
	for msg != "" {
		name, ok := undefinedRule(msg)
		if !ok || len(unknown) == 20 {
			break
		}
		unknown = append(unknown, name)
		if v == c.v {
			v = validator.New(validator.WithRequiredStructEnabled())
		}
		// Known from here on, so that parsing goes on to the next one.
		if err := v.RegisterValidation(name, func(validator.FieldLevel) bool { return true }); err != nil {
			msg = ""
			break
		}
		msg = parse(v, tag)
	}
	var problems []string
	switch len(unknown) {
	case 0:
	case 1:
		problems = append(problems, fmt.Sprintf("unknown rule %q", unknown[0]))
	default:
		quoted := make([]string, len(unknown))
		for i, u := range unknown {
			quoted[i] = fmt.Sprintf("%q", u)
		}
		problems = append(problems, "unknown rules "+strings.Join(quoted, ", "))
	}
	switch {
	case msg == "":
	case strings.HasPrefix(msg, "Invalid validation tag on field"):
		problems = append(problems, "a rule is empty (two commas in a row, or one at an end)")
	default:
		problems = append(problems, msg)
	}
	return strings.Join(problems, "; ")
}

// parse has the validator parse tag and returns its complaint, or "". The
// validator parses a tag before it looks at the value, and panics on a tag
// it cannot read; the value here is nil, so that nothing else is checked.
func parse(v *validator.Validate, tag string) (complaint string) {
	defer func() {
		if r := recover(); r != nil {
			msg := fmt.Sprint(r)
			if isParseComplaint(msg) {
				complaint = msg
			}
		}
	}()
	_ = v.Var(nil, tag)
	return ""
}

// The validator's complaints about a tag (validator/v10's cache.go).
const (
	undefinedPrefix = "Undefined validation function '"
)

func isParseComplaint(msg string) bool {
	return strings.HasPrefix(msg, undefinedPrefix) ||
		strings.HasPrefix(msg, "Invalid validation tag on field") ||
		strings.Contains(msg, "'keys' tag") || strings.Contains(msg, "'endkeys' tag")
}

// undefinedRule reads the rule's name from "Undefined validation function
// 'name' on field ”".
func undefinedRule(msg string) (string, bool) {
	rest, ok := strings.CutPrefix(msg, undefinedPrefix)
	if !ok {
		return "", false
	}
	name, _, ok := strings.Cut(rest, "' on field")
	return name, ok && name != ""
}
