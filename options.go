package onceq

import (
	"errors"
	"fmt"
	"time"
)

// OptionError is an option a constructor refused (producer.New,
// consumer.New, delay.NewService, checkpoint.Open): the option as it is
// named in Go, the value given and what is wanted instead. Constructors
// check every option before they return and join all that they refuse
// (errors.Join), so one run shows every problem. Kind is the package's
// ErrConfig, reachable through errors.Is.
//
// Programs that expose options under other names (the onceq CLI's flags)
// find each refused option with Options and say it in their own words.
type OptionError struct {
	Pkg    string // "consumer", "producer", ...
	Option string // "Concurrency", "Backoff", ...; the Go name of the option
	Value  any    // the refused value; nil when the option is missing
	Want   string // what is wanted, and how to fix it
	Kind   error  // the package's ErrConfig
}

func (e *OptionError) Error() string {
	return e.Pkg + ": " + e.Describe(e.Option)
}

// Describe says what is wrong, naming the option as name: "NAME VALUE:
// WANT", or "NAME: WANT" when the option is missing.
func (e *OptionError) Describe(name string) string {
	if e.Value == nil {
		return name + ": " + e.Want
	}
	return name + " " + formatValue(e.Value) + ": " + e.Want
}

// Unwrap returns Kind.
func (e *OptionError) Unwrap() error { return e.Kind }

// Options returns the OptionErrors in err, which may be joined, or none.
func Options(err error) []*OptionError {
	var out []*OptionError
	var walk func(error)
	walk = func(err error) {
		if oe, ok := err.(*OptionError); ok {
			out = append(out, oe)
			return
		}
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				walk(e)
			}
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		}
	}
	if err != nil {
		walk(err)
	}
	return out
}

func formatValue(v any) string {
	switch v := v.(type) {
	case string:
		return quoteCut(v)
	case time.Duration:
		return v.String()
	case Backoff:
		return fmt.Sprintf("(base %v, factor %v, max %v)", v.Base, v.Factor, v.Max)
	}
	return fmt.Sprint(v)
}

// OptionErrors collects the options one constructor refuses.
type OptionErrors struct {
	Pkg  string
	Kind error
	errs []error
}

// Bad records that option refused value; want is formatted with args.
func (o *OptionErrors) Bad(option string, value any, want string, args ...any) {
	if len(args) > 0 {
		want = fmt.Sprintf(want, args...)
	}
	o.errs = append(o.errs, &OptionError{Pkg: o.Pkg, Option: option, Value: value, Want: want, Kind: o.Kind})
}

// Missing records that a required option was not given.
func (o *OptionErrors) Missing(option, want string) { o.Bad(option, nil, want) }

// Add records an error that names its own option (from broker.Conn's
// Validate, say); it is wrapped with Kind unless it already matches it.
func (o *OptionErrors) Add(err error) {
	if err == nil {
		return
	}
	if !errors.Is(err, o.Kind) {
		err = fmt.Errorf("%s: %w: %w", o.Pkg, err, o.Kind)
	}
	o.errs = append(o.errs, err)
}

// Err joins every recorded error, or returns nil.
func (o *OptionErrors) Err() error { return errors.Join(o.errs...) }

// ApplyOptions calls apply with each of opts, and records a nil one in
// errs: the loop every constructor's options go through.
func ApplyOptions[O comparable](errs *OptionErrors, opts []O, apply func(O)) {
	var none O
	for _, o := range opts {
		if o == none {
			errs.Bad("Opt", nil, "a nil option")
			continue
		}
		apply(o)
	}
}
