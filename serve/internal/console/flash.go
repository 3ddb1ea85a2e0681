package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strings"
	"unicode/utf8"
)

// Flash messages: an action of the console says what came of it on the
// page it returns to. The message travels in a cookie the server sets
// with the redirect (HttpOnly, SameSite=Strict, of /console, for a
// minute), which the next page reads once and clears; it is signed with
// the session's token (HMAC-SHA256), or, without tokens
// (InsecureNoAuth), with a key of the process. So the text a console
// page shows as a message is always the server's: a link cannot carry
// one (no query parameter is read for it), and a cookie made elsewhere
// (by a sibling domain, say) fails its signature and shows nothing.

const (
	flashCookie = "onceq_flash"
	// maxFlash bounds a message kept in a cookie, well within the 4 KB a
	// browser keeps of one.
	maxFlash = 1024
)

// flashKey signs the messages of a console without tokens.
var flashKey = func() []byte {
	k := make([]byte, 32)
	_, _ = rand.Read(k) // never fails (crypto/rand)
	return k
}()

// flashMAC signs msg for the session of r.
func flashMAC(r *http.Request, msg string) []byte {
	key := flashKey
	if secret, ok := consoleSecret(r); ok {
		key = []byte(secret)
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(msg))
	return m.Sum(nil)
}

// setFlash sets the flash cookie of msg, cut to maxFlash bytes.
func setFlash(w http.ResponseWriter, r *http.Request, msg string) {
	if len(msg) > maxFlash {
		msg = strings.ToValidUTF8(msg[:maxFlash], "") + "…"
	}
	enc := base64.RawURLEncoding
	http.SetCookie(w, &http.Cookie{Name: flashCookie, Value: enc.EncodeToString([]byte(msg)) + "." + enc.EncodeToString(flashMAC(r, msg)),
		Path: "/console", MaxAge: 60, HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
}

// takeFlash returns the message of the request's flash cookie, once: it
// clears the cookie. A cookie that does not bear the session's signature
// shows nothing.
func takeFlash(w http.ResponseWriter, r *http.Request) string {
	c, err := r.Cookie(flashCookie)
	if err != nil {
		return ""
	}
	http.SetCookie(w, &http.Cookie{Name: flashCookie, Path: "/console", MaxAge: -1, HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	enc := base64.RawURLEncoding
	m, sig, ok := strings.Cut(c.Value, ".")
	if !ok {
		return ""
	}
	msg, err1 := enc.DecodeString(m)
	mac, err2 := enc.DecodeString(sig)
	if err1 != nil || err2 != nil || !utf8.Valid(msg) || !hmac.Equal(mac, flashMAC(r, string(msg))) {
		return ""
	}
	return string(msg)
}
