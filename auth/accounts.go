package auth

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"golang.org/x/crypto/bcrypt"
)

// Accounts are operators' accounts of the admin API, lmstfy's admin
// accounts: a name and the bcrypt hash of its password each, as an
// htpasswd file keeps them. A request to the admin API that gives one's
// name and password by HTTP basic auth is an operator's.
type Accounts map[string][]byte

// MaxAccountName bounds an account's name.
const MaxAccountName = 64

// ParseAccounts reads accounts from an htpasswd file's lines, name:hash
// with a bcrypt hash ($2a$, $2b$ or $2y$, as htpasswd -B and
// HashPassword write it); blank lines and lines starting with # are left
// out. An error names the source and the line, and what is wrong with it.
func ParseAccounts(r io.Reader, source string) (Accounts, error) {
	out := Accounts{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, hash, ok := strings.Cut(line, ":")
		switch {
		case !ok:
			return nil, fmt.Errorf("%s:%d: want name:bcrypt-hash (make one with onceq token account NAME)", source, n)
		case !validAccountName(name):
			return nil, fmt.Errorf("%s:%d: account name %q: want 1 to %d letters, digits, '.', '_', '-' or '@'", source, n, name, MaxAccountName)
		case out[name] != nil:
			return nil, fmt.Errorf("%s:%d: account %s given twice", source, n, name)
		}
		if _, err := bcrypt.Cost([]byte(hash)); err != nil {
			return nil, fmt.Errorf("%s:%d: account %s: its password's hash is not bcrypt's ($2y$...): %v (make one with onceq token account %s)", source, n, name, err, name)
		}
		out[name] = []byte(hash)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	return out, nil
}

// validAccountName says whether name may name an account.
func validAccountName(name string) bool {
	if name == "" || len(name) > MaxAccountName {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("._-@", c) >= 0) {
			return false
		}
	}
	return true
}

// Check says whether name is an account (known), and whether password is
// its password.
func (a Accounts) Check(name, password string) (known, ok bool) {
	hash, known := a[name]
	if !known {
		return false, false
	}
	return true, bcrypt.CompareHashAndPassword(hash, []byte(password)) == nil
}

// HashPassword returns an htpasswd line of account name with password:
// name:bcrypt-hash.
func HashPassword(name string, password []byte) (string, error) {
	if !validAccountName(name) {
		return "", fmt.Errorf("account name %q: want 1 to %d letters, digits, '.', '_', '-' or '@'", name, MaxAccountName)
	}
	password = bytes.TrimRight(password, "\r\n")
	switch {
	case len(password) < 12:
		return "", errors.New("the password has fewer than 12 bytes: choose a longer one")
	case len(password) > 72:
		return "", errors.New("the password has more than 72 bytes, bcrypt's limit: choose a shorter one")
	}
	hash, err := bcrypt.GenerateFromPassword(password, bcrypt.DefaultCost)
	if err != nil {
		return "", err
	}
	return name + ":" + string(hash), nil
}
