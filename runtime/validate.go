package runtime

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/go-playground/validator/v10"
)

// validate is shared by every task: validator caches each struct's parsed
// rules, so one instance is both the fast and the documented way to use it.
var validate = newValidator()

func newValidator() *validator.Validate {
	v := validator.New(validator.WithRequiredStructEnabled())
	// Name fields as they appear in the payload, so errors match the JSON.
	v.RegisterTagNameFunc(func(f reflect.StructField) string {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			return ""
		case "":
			return f.Name
		}
		return name
	})
	return v
}

// FieldError is one rule a payload field broke.
type FieldError struct {
	Field string // the field's path in the JSON payload, e.g. "to" or "address.zip"
	Rule  string // the validate rule, e.g. "email" or "max"
	Param string // the rule's parameter, e.g. "200" for max=200
}

func (f FieldError) String() string {
	if f.Param != "" {
		return fmt.Sprintf("%s fails %s=%s", f.Field, f.Rule, f.Param)
	}
	return fmt.Sprintf("%s fails %s", f.Field, f.Rule)
}

// ValidationError reports a task value that breaks its validate rules.
type ValidationError struct {
	Kind   string
	Fields []FieldError
}

func (e *ValidationError) Error() string {
	parts := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		parts[i] = f.String()
	}
	return fmt.Sprintf("invalid %s: %s", e.Kind, strings.Join(parts, "; "))
}

// Validate checks v against its `validate` struct tags
// (github.com/go-playground/validator/v10). Generated Enqueue functions call
// it before inserting, and generated handlers again after decoding, so a row
// written some other way cannot reach a handler unchecked.
func Validate(kind string, v any) (err error) {
	defer func() {
		// validator panics on a malformed rule; that is a bug in the task
		// declaration, reported as an error rather than a crash.
		if r := recover(); r != nil {
			err = fmt.Errorf("validate %s: bad validate tag: %v", kind, r)
		}
	}()
	err = validate.Struct(v)
	var errs validator.ValidationErrors
	if !errors.As(err, &errs) {
		if err != nil {
			return fmt.Errorf("validate %s: %w", kind, err)
		}
		return nil
	}
	ve := &ValidationError{Kind: kind}
	for _, fe := range errs {
		path := fe.Namespace()
		if _, rest, ok := strings.Cut(path, "."); ok {
			path = rest // drop the struct's own name
		}
		ve.Fields = append(ve.Fields, FieldError{Field: path, Rule: fe.Tag(), Param: fe.Param()})
	}
	return ve
}
