package main

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// configFile is a config file's flag values, by command path ("onceq",
// "onceq worker") and flag name.
type configFile struct {
	path     string
	sections map[string]map[string]fileValue
}

// fileValue is one key of a config file.
type fileValue struct {
	key    string   // as a message shows it: "concurrency", "[worker] concurrency"
	values []string // one, or a list's items
	list   bool
	line   int // 0 when not known
}

// where names the file and, when known, the line of the value.
func (v fileValue) where(path string) string {
	if v.line == 0 {
		return path
	}
	return fmt.Sprintf("%s line %d", path, v.line)
}

// lookup returns the file's value of f, a flag of cmd: from cmd's table,
// else, when f is inherited, from the nearest parent's table that has it.
func (cf *configFile) lookup(cmd *cobra.Command, f *pflag.Flag) (fileValue, bool) {
	if cf == nil {
		return fileValue{}, false
	}
	for c := cmd; c != nil; c = c.Parent() {
		if v, ok := cf.sections[c.CommandPath()][f.Name]; ok && commandFlags(c).Lookup(f.Name) == f {
			return v, true
		}
	}
	return fileValue{}, false
}

// set gives flag f the value, through the flag's Value.Set: a list's
// items one by one, as repeated flags.
func (v fileValue) set(f *pflag.Flag) error {
	sv, isList := f.Value.(pflag.SliceValue)
	if v.list && !isList {
		return fmt.Errorf("%s: --%s takes one value, not a list", v.key, f.Name)
	}
	if v.list && len(v.values) == 0 {
		f.Changed = true
		return sv.Replace(nil)
	}
	for _, s := range v.values {
		if err := setFlag(f, s); err != nil {
			return errors.New(badValue(fmt.Sprintf("%s = %s", v.key, strconv.Quote(masked(f.Name, s))), f, err))
		}
	}
	return nil
}

// loadConfig reads and checks the config file at path: every table a
// command, every key a flag of its command, every value one the flag
// parses (checked on a command tree of its own, so that nothing of it
// reaches the command being run).
func loadConfig(path string) (*configFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, usagef("--config: %v: name an existing TOML file (or unset ONCEQ_CONFIG)", err)
	}
	var tree map[string]any
	if _, err := toml.Decode(string(data), &tree); err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, usagef("%s line %d: %s (the file is TOML)", path, pe.Position.Line, pe.Message)
		}
		return nil, usagef("%s: %v", path, err)
	}
	l := &loader{cf: &configFile{path: path, sections: map[string]map[string]fileValue{}}, lines: keyLines(data)}
	l.table(newRootCmd(&globals{}), nil, tree)
	if len(l.errs) > 0 {
		sort.SliceStable(l.errs, func(i, j int) bool { return l.errs[i].line < l.errs[j].line })
		msgs := make([]string, len(l.errs))
		for i, e := range l.errs {
			msgs[i] = e.msg
		}
		return nil, usagef("%s", strings.Join(msgs, "\n"))
	}
	return l.cf, nil
}

// loader walks a decoded config file along the command tree.
type loader struct {
	cf    *configFile
	lines map[string]int
	errs  []keyError
}

// keyError is one refused key of the file, sorted by line.
type keyError struct {
	line int
	msg  string
}

func (l *loader) fail(line int, format string, args ...any) {
	at := fileValue{line: line}.where(l.cf.path)
	l.errs = append(l.errs, keyError{line, at + ": " + fmt.Sprintf(format, args...)})
}

// table reads the table at path (nil: the top level), the flags of cmd and
// the tables of its subcommands.
func (l *loader) table(cmd *cobra.Command, path []string, tab map[string]any) {
	header := ""
	if len(path) > 0 {
		header = "[" + strings.Join(path, ".") + "] "
	}
	fl := commandFlags(cmd)
	fileFlag := cmd.Root().PersistentFlags().Lookup(configFlag)
	section := map[string]fileValue{}
	l.cf.sections[cmd.CommandPath()] = section
	keys := make([]string, 0, len(tab))
	for key := range tab {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	for _, key := range keys {
		val := tab[key]
		keyPath := append(path[:len(path):len(path)], key)
		line := l.lines[strings.Join(keyPath, ".")]
		if sub, ok := val.(map[string]any); ok {
			if c := subcommand(cmd, key); c != nil {
				l.table(c, keyPath, sub)
			} else {
				l.fail(line, "[%s]: no such command %s %s%s", strings.Join(keyPath, "."), cmd.CommandPath(), key,
					suggest(key, commandNames(cmd)))
			}
			continue
		}
		f := fl.Lookup(key)
		switch {
		case f == fileFlag && f != nil:
			l.fail(line, "%s%s: a config file does not name another: use --config or ONCEQ_CONFIG", header, key)
			continue
		case f == nil || !configurable(f):
			what := "no such flag of " + cmd.CommandPath()
			if cmd == cmd.Root() {
				what = "no such global flag or command of onceq"
			}
			l.fail(line, "%s%s: %s%s", header, key, what, suggest(key, append(flagNames(fl), commandNames(cmd)...)))
			continue
		}
		v := fileValue{key: header + key, line: line}
		var ok bool
		if v.values, v.list, ok = tomlStrings(val); !ok {
			l.fail(line, "%s%s: want a string, number, boolean or a list of them, got %T", header, key, val)
			continue
		}
		if err := v.set(f); err != nil {
			l.fail(line, "%v", err)
			continue
		}
		section[key] = v
	}
}

// subcommand returns cmd's subcommand called name, or nil.
func subcommand(cmd *cobra.Command, name string) *cobra.Command {
	for _, c := range cmd.Commands() {
		if c.Name() == name {
			return c
		}
	}
	return nil
}

func commandNames(cmd *cobra.Command) []string {
	var names []string
	for _, c := range cmd.Commands() {
		names = append(names, c.Name())
	}
	return names
}

func flagNames(fl *pflag.FlagSet) []string {
	var names []string
	fl.VisitAll(func(f *pflag.Flag) {
		if configurable(f) {
			names = append(names, f.Name)
		}
	})
	return names
}

// tomlStrings returns a decoded TOML value as the strings a flag's Set
// takes: one for a scalar, the items of an array.
func tomlStrings(v any) (values []string, list, ok bool) {
	items, list := v.([]any)
	if !list {
		s, ok := tomlScalar(v)
		return []string{s}, false, ok
	}
	values = make([]string, 0, len(items))
	for _, it := range items {
		s, ok := tomlScalar(it)
		if !ok {
			return nil, true, false
		}
		values = append(values, s)
	}
	return values, true, true
}

func tomlScalar(v any) (string, bool) {
	switch v := v.(type) {
	case string:
		return v, true
	case bool:
		return strconv.FormatBool(v), true
	case int64:
		return strconv.FormatInt(v, 10), true
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64), true
	case time.Time:
		return v.Format(time.RFC3339Nano), true
	}
	return "", false
}

// suggest returns "; did you mean X?" for the candidate nearest to name,
// or "" when none is near.
func suggest(name string, candidates []string) string {
	if best := nearest(name, candidates); best != "" {
		return "; did you mean " + best + "?"
	}
	return ""
}

// nearest returns the candidate nearest to name, within two edits and
// fewer than half its length, or "".
func nearest(name string, candidates []string) string {
	best, bestD := "", min(3, (len(name)+1)/2)
	for _, c := range candidates {
		if d := editDistance(name, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// keyLines maps the keys of a TOML document, dotted ("worker.concurrency"),
// to the lines that define them, for messages. It reads what config files
// hold: [table] headers and key = value lines, with bare, quoted or dotted
// keys; a key it does not find (in an inline table, say) has no line, and
// its message names none.
func keyLines(data []byte) map[string]int {
	lines := map[string]int{}
	mark := func(key []string, n int) {
		for i := 1; i <= len(key); i++ {
			if k := strings.Join(key[:i], "."); lines[k] == 0 {
				lines[k] = n
			}
		}
	}
	var table []string
	for i, line := range strings.Split(string(data), "\n") {
		s := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(s, "[["): // an array of tables: refused as a value
		case strings.HasPrefix(s, "["):
			if key, rest, ok := parseKey(s[1:]); ok && strings.HasPrefix(rest, "]") {
				table = key
				mark(key, i+1)
			}
		default:
			if key, rest, ok := parseKey(s); ok && strings.HasPrefix(rest, "=") {
				mark(append(table[:len(table):len(table)], key...), i+1)
			}
		}
	}
	return lines
}

// parseKey reads a TOML key, parts separated by dots, from the start of s
// and returns its parts and what follows it.
func parseKey(s string) (parts []string, rest string, ok bool) {
	for {
		s = strings.TrimLeft(s, " \t")
		var part string
		switch {
		case s == "":
			return nil, "", false
		case s[0] == '"':
			end := 1
			for end < len(s) && s[end] != '"' {
				if s[end] == '\\' {
					end++
				}
				end++
			}
			if end >= len(s) {
				return nil, "", false
			}
			var err error
			if part, err = strconv.Unquote(s[:end+1]); err != nil {
				part = s[1:end]
			}
			s = s[end+1:]
		case s[0] == '\'':
			end := strings.IndexByte(s[1:], '\'')
			if end < 0 {
				return nil, "", false
			}
			part, s = s[1:end+1], s[end+2:]
		default:
			end := strings.IndexFunc(s, func(r rune) bool {
				return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-')
			})
			if end == 0 {
				return nil, "", false
			}
			if end < 0 {
				end = len(s)
			}
			part, s = s[:end], s[end:]
		}
		parts = append(parts, part)
		s = strings.TrimLeft(s, " \t")
		if !strings.HasPrefix(s, ".") {
			return parts, s, true
		}
		s = s[1:]
	}
}
