package auth

import (
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"
)

// TestAccounts: an htpasswd file of bcrypt lines is read with its blank
// lines and comments; each bad line is refused naming its source, line
// and what to do; a password checks against its account alone.
func TestAccounts(t *testing.T) {
	line, err := HashPassword("ops", []byte("correct horse battery\n"))
	if err != nil {
		t.Fatal(err)
	}
	apache, _ := bcrypt.GenerateFromPassword([]byte("apache's password"), bcrypt.MinCost)
	file := "# operators\n\n" + line + "\nweb:" + strings.Replace(string(apache), "$2a$", "$2y$", 1) + "\n"
	a, err := ParseAccounts(strings.NewReader(file), "accounts")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, pw    string
		known, pass bool
	}{
		{"ops", "correct horse battery", true, true},
		{"ops", "correct horse battery\n", true, false},
		{"web", "apache's password", true, true},
		{"web", "correct horse battery", true, false},
		{"nobody", "correct horse battery", false, false},
	} {
		if known, ok := a.Check(tc.name, tc.pw); known != tc.known || ok != tc.pass {
			t.Errorf("Check(%q, %q): known %v, ok %v; want %v, %v", tc.name, tc.pw, known, ok, tc.known, tc.pass)
		}
	}
	for _, tc := range []struct{ file, want string }{
		{"ops\n", "accounts:1: want name:bcrypt-hash"},
		{"\n# x\nops:plain-password\n", "accounts:3: account ops: its password's hash is not bcrypt's"},
		{line + "\n" + line + "\n", "accounts:2: account ops given twice"},
		{"a b:" + string(apache) + "\n", `accounts:1: account name "a b"`},
		{":" + string(apache) + "\n", `accounts:1: account name ""`},
	} {
		if _, err := ParseAccounts(strings.NewReader(tc.file), "accounts"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseAccounts(%q): %v; want an error with %q", tc.file, err, tc.want)
		}
	}
	for _, pw := range []string{"short", strings.Repeat("x", 73)} {
		if _, err := HashPassword("ops", []byte(pw)); err == nil {
			t.Errorf("HashPassword of %d bytes: no error", len(pw))
		}
	}
	if _, err := HashPassword("a:b", []byte("correct horse battery")); err == nil {
		t.Error(`HashPassword("a:b"): no error; a ':' ends the name`)
	}
}

// FuzzParseAccounts: any input parses or fails with a line's error, and
// what parses has only valid names and bcrypt hashes.
func FuzzParseAccounts(f *testing.F) {
	f.Add("ops:$2a$04$abcdefghijklmnopqrstuuJ3o9mYb0cGcM0OWMOl9r7Z/8xoX0Py.\n")
	f.Add("# c\n\nx\n")
	f.Fuzz(func(t *testing.T, in string) {
		a, err := ParseAccounts(strings.NewReader(in), "f")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "f:") {
				t.Fatalf("error %q does not name its source", err)
			}
			return
		}
		for name, hash := range a {
			if !validAccountName(name) {
				t.Fatalf("account name %q taken", name)
			}
			if _, err := bcrypt.Cost(hash); err != nil {
				t.Fatalf("account %s: hash %q taken: %v", name, hash, err)
			}
		}
	})
}
