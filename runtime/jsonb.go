package runtime

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// PostgreSQL's numeric, which jsonb stores numbers as, holds at most this
// many digits before the decimal point and after it.
const (
	numericMaxIntDigits  = 131072
	numericMaxFracDigits = 16383
	// numericMaxExponent bounds the exponent numeric's input accepts at all.
	numericMaxExponent = 1<<30 - 1
)

var errNULEscape = errors.New(`contains \u0000, which PostgreSQL's jsonb cannot store`)

// jsonbRefusal returns why PostgreSQL's jsonb would refuse b, a valid JSON
// document, or nil. jsonb is stricter than JSON: the text must be UTF-8
// (Go's JSON decoder lets invalid bytes in strings through); a string cannot hold NUL
// (\u0000); a \u escape of a UTF-16 surrogate must be a high one followed by
// a low one; and a number must fit numeric, with at most 131072 digits
// before the decimal point and 16383 after it. It also refuses a document
// nested more than MaxJSONDepth deep, which the server parses only while
// its stack lasts.
func jsonbRefusal(b []byte) error {
	if !utf8.Valid(b) {
		return errors.New("is not valid UTF-8")
	}
	depth := 0
	for i := 0; i < len(b); {
		var err error
		switch c := b[i]; {
		case c == '"':
			i, err = jsonbString(b, i+1)
		case c == '-' || ('0' <= c && c <= '9'):
			i, err = jsonbNumber(b, i)
		case c == '[' || c == '{':
			if depth++; depth > MaxJSONDepth {
				return fmt.Errorf("is nested more than %d levels deep, the most allowed (MaxJSONDepth)", MaxJSONDepth)
			}
			i++
		case c == ']' || c == '}':
			depth--
			i++
		default:
			i++
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// jsonbString checks the string whose contents begin at b[i] and returns
// the index after its closing quote.
func jsonbString(b []byte, i int) (int, error) {
	for i < len(b) {
		switch b[i] {
		case '"':
			return i + 1, nil
		case '\\':
			if i+1 < len(b) && b[i+1] == 'u' {
				r := hex4(b, i+2)
				switch {
				case r == 0:
					return 0, errNULEscape
				case 0xDC00 <= r && r <= 0xDFFF:
					return 0, fmt.Errorf(`contains a lone UTF-16 surrogate escape (\u%04x), which PostgreSQL's jsonb cannot store`, r)
				case 0xD800 <= r && r <= 0xDBFF:
					if i+11 >= len(b) || b[i+6] != '\\' || b[i+7] != 'u' || hex4(b, i+8) < 0xDC00 || hex4(b, i+8) > 0xDFFF {
						return 0, fmt.Errorf(`contains a lone UTF-16 surrogate escape (\u%04x), which PostgreSQL's jsonb cannot store`, r)
					}
					i += 12
				default:
					i += 6
				}
				continue
			}
			i += 2
		default:
			i++
		}
	}
	return i, nil
}

// hex4 is the value of the four hex digits at b[i:], or -1.
func hex4(b []byte, i int) int {
	if i+4 > len(b) {
		return -1
	}
	v := 0
	for _, c := range b[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return -1
		}
		v = v<<4 | int(c)
	}
	return v
}

// jsonbNumber checks the number starting at b[i] and returns the index
// after it. It follows numeric's input: the scale is the digits after the
// point less the exponent, and the most significant nonzero digit's power
// of ten must stay below numericMaxIntDigits.
func jsonbNumber(b []byte, i int) (int, error) {
	start := i
	if b[i] == '-' {
		i++
	}
	intStart := i
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	intDigits := b[intStart:i]
	var fracDigits []byte
	if i < len(b) && b[i] == '.' {
		i++
		fracStart := i
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
		fracDigits = b[fracStart:i]
	}
	var exp int64
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		neg := false
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			neg = b[i] == '-'
			i++
		}
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			if exp <= numericMaxExponent {
				exp = exp*10 + int64(b[i]-'0')
			}
			i++
		}
		if neg {
			exp = -exp
		}
	}
	tooBig := func() (int, error) {
		n := b[start:i]
		if len(n) > 40 {
			n = append(n[:37:37], "..."...)
		}
		return 0, fmt.Errorf("holds the number %s, which does not fit PostgreSQL's numeric "+
			"(at most %d digits before the decimal point and %d after)", n, numericMaxIntDigits, numericMaxFracDigits)
	}
	if exp >= numericMaxExponent || exp <= -numericMaxExponent {
		return tooBig()
	}
	if int64(len(fracDigits))-exp > numericMaxFracDigits {
		return tooBig()
	}
	// The power of ten of the most significant nonzero digit.
	for k, c := range intDigits {
		if c != '0' {
			if int64(len(intDigits)-1-k)+exp >= numericMaxIntDigits {
				return tooBig()
			}
			return i, nil
		}
	}
	for k, c := range fracDigits {
		if c != '0' {
			if int64(-(k+1))+exp >= numericMaxIntDigits {
				return tooBig()
			}
			return i, nil
		}
	}
	return i, nil
}

// MaxJSONDepth bounds how deeply a payload or a result nests arrays and
// objects. PostgreSQL refuses a deeper document only when parsing it runs
// out of stack (max_stack_depth), which a smaller server setting brings
// closer.
const MaxJSONDepth = 1000
