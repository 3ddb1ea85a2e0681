package main

import (
	"errors"
	"strings"
	"unicode"

	"github.com/spf13/pflag"

	"github.com/onceq/onceq"
)

// optionAnnotation names, on a flag, the library option the flag sets.
// A flag without it sets the option of its name: --commit-interval sets
// CommitInterval.
const optionAnnotation = "onceq-option"

// setsOption records that the flags set option (its Go name, such as
// "TaskTimeout"), where their names are not the option's.
func setsOption(fl *pflag.FlagSet, option string, flags ...string) {
	for _, name := range flags {
		if err := fl.SetAnnotation(name, optionAnnotation, []string{option}); err != nil {
			panic(err) // a flag defined above; a typo is a programming error
		}
	}
}

// flagError turns the options a library constructor refused into a usage
// error that names the flags setting them, one line each, so the message
// says which flag to fix. Errors that are not about one option keep their
// text.
func flagError(fl *pflag.FlagSet, err error) error {
	if err == nil {
		return nil
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	lines := make([]string, 0, len(errs))
	for _, e := range errs {
		var oe *onceq.OptionError
		if errors.As(e, &oe) {
			lines = append(lines, oe.Describe(optionFlags(fl, oe.Option)))
		} else {
			lines = append(lines, e.Error())
		}
	}
	return usageError{wrapLines{msg: strings.Join(lines, "\n"), err: err}}
}

// wrapLines is an error with its own message that still matches what it
// wraps.
type wrapLines struct {
	msg string
	err error
}

func (w wrapLines) Error() string { return w.msg }
func (w wrapLines) Unwrap() error { return w.err }

// optionFlags names the flags that set option, "--a" or "--a/--b", or the
// option's own name when no flag sets it.
func optionFlags(fl *pflag.FlagSet, option string) string {
	var names []string
	fl.VisitAll(func(f *pflag.Flag) {
		if a := f.Annotations[optionAnnotation]; len(a) == 1 && a[0] == option {
			names = append(names, "--"+f.Name)
		}
	})
	if len(names) == 0 {
		if f := fl.Lookup(kebab(option)); f != nil && f.Annotations[optionAnnotation] == nil {
			names = append(names, "--"+f.Name)
		}
	}
	if len(names) == 0 {
		return option
	}
	return strings.Join(names, "/")
}

// kebab writes a Go option name as a flag name: "MaxRecordsPerCommit" is
// "max-records-per-commit", "WithGuarantee" is "guarantee".
func kebab(option string) string {
	option = strings.TrimPrefix(option, "With")
	var b strings.Builder
	for i, r := range option {
		if unicode.IsUpper(r) {
			if i > 0 {
				b.WriteByte('-')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}
