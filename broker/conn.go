package broker

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// DefaultBrokers is where clients look when nothing else is configured.
const DefaultBrokers = "127.0.0.1:9092"

// ErrConfig is wrapped by every setting this package refuses before it
// sends anything: a connection setting, and a topic's name, partition
// count or configs.
var ErrConfig = errors.New("invalid connection setting")

// Conn is how to reach a Kafka cluster. The zero value with Brokers set is a
// plaintext connection without authentication.
type Conn struct {
	// Brokers are the seed brokers, host:port each. Default DefaultBrokers.
	Brokers []string
	// ClientID names this client to the brokers. Default "onceq".
	ClientID string
	// TLS configures encryption; off unless Enabled or a file is given.
	TLS TLS
	// SASL configures authentication; off when Mechanism is empty.
	SASL SASL
	// Replication is how the topics an Admin of this connection creates
	// are replicated, onceq's own and queues alike. Default: the brokers'
	// defaults, refused when they give one replica on a cluster of
	// several brokers (see Replication).
	Replication Replication
}

// TLS settings. Giving any file turns TLS on.
type TLS struct {
	Enabled bool
	// CAFile is a PEM bundle of CAs to trust instead of the system's.
	CAFile string
	// CertFile and KeyFile are a PEM client certificate and key, for
	// mutual TLS. Both or neither.
	CertFile, KeyFile string
	// ServerName overrides the name checked on the broker's certificate.
	ServerName string
	// InsecureSkipVerify turns off certificate checks. Off by default;
	// for testing only.
	InsecureSkipVerify bool
}

// SASL settings.
type SASL struct {
	// Mechanism is PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
	Mechanism string
	User      string
	Password  string
}

func configErr(format string, args ...any) error {
	return fmt.Errorf("broker: %s: %w", fmt.Sprintf(format, args...), ErrConfig)
}

// topicErr is an invalid topic setting (a name, a partition count, a
// config). It matches ErrConfig without ErrConfig's text, which speaks of
// connections.
func topicErr(format string, args ...any) error {
	return settingError("broker: " + fmt.Sprintf(format, args...))
}

type settingError string

func (e settingError) Error() string        { return string(e) }
func (e settingError) Is(target error) bool { return target == ErrConfig }

// ParseBrokers splits a comma-separated broker list and checks every entry.
func ParseBrokers(s string) ([]string, error) {
	var out []string
	for _, b := range strings.Split(s, ",") {
		b = strings.TrimSpace(b)
		if b == "" {
			continue
		}
		host, port, err := net.SplitHostPort(b)
		if err != nil || host == "" || port == "" {
			return nil, configErr("broker address %q: want host:port, for example 127.0.0.1:9092", b)
		}
		out = append(out, b)
	}
	if len(out) == 0 {
		return nil, configErr("no broker addresses in %q: give host:port[,host:port...]", s)
	}
	return out, nil
}

// Validate checks the settings without connecting.
func (c Conn) Validate() error {
	for _, b := range c.Brokers {
		if _, err := ParseBrokers(b); err != nil {
			return err
		}
	}
	t := c.TLS
	if (t.CertFile == "") != (t.KeyFile == "") {
		return configErr("TLS client certificate and key go together: give both --tls-cert and --tls-key, or neither")
	}
	for _, f := range []string{t.CAFile, t.CertFile, t.KeyFile} {
		if f == "" {
			continue
		}
		if _, err := os.Stat(f); err != nil {
			return configErr("TLS file %q cannot be read: %v", f, err)
		}
	}
	switch strings.ToUpper(c.SASL.Mechanism) {
	case "":
		if c.SASL.User != "" || c.SASL.Password != "" {
			return configErr("a SASL user or password is set without a mechanism: add --sasl-mechanism PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
		}
	case "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
		if c.SASL.User == "" {
			return configErr("SASL %s needs a user: set --sasl-user", c.SASL.Mechanism)
		}
	default:
		return configErr("SASL mechanism %q is not supported: use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", c.SASL.Mechanism)
	}
	return c.Replication.validate()
}

// Opts returns the franz-go options for this connection, with onceq's
// partitioner (KeyPartitioner), which options after them may replace.
func (c Conn) Opts() ([]kgo.Opt, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	brokers := c.Brokers
	if len(brokers) == 0 {
		brokers = []string{DefaultBrokers}
	}
	id := c.ClientID
	if id == "" {
		id = "onceq"
	}
	opts := []kgo.Opt{kgo.SeedBrokers(brokers...), kgo.ClientID(id), kgo.RecordPartitioner(KeyPartitioner())}
	if tc, err := c.TLS.config(); err != nil {
		return nil, err
	} else if tc != nil {
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	s := c.SASL
	switch strings.ToUpper(s.Mechanism) {
	case "PLAIN":
		opts = append(opts, kgo.SASL(plain.Auth{User: s.User, Pass: s.Password}.AsMechanism()))
	case "SCRAM-SHA-256":
		opts = append(opts, kgo.SASL(scram.Auth{User: s.User, Pass: s.Password}.AsSha256Mechanism()))
	case "SCRAM-SHA-512":
		opts = append(opts, kgo.SASL(scram.Auth{User: s.User, Pass: s.Password}.AsSha512Mechanism()))
	}
	return opts, nil
}

func (t TLS) config() (*tls.Config, error) {
	if !t.Enabled && t.CAFile == "" && t.CertFile == "" && !t.InsecureSkipVerify && t.ServerName == "" {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify} //nolint:gosec // opt-in, documented as testing only
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, configErr("reading TLS CA file: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, configErr("TLS CA file %q holds no PEM certificate", t.CAFile)
		}
		tc.RootCAs = pool
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, configErr("loading TLS client certificate %q and key %q: %v", t.CertFile, t.KeyFile, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// NewClient makes a franz-go client for this connection with extra options.
func (c Conn) NewClient(extra ...kgo.Opt) (*kgo.Client, error) {
	opts, err := c.Opts()
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(append(opts, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("broker: creating client: %w", err)
	}
	return cl, nil
}

// ErrUnreachable is wrapped by the errors of requests that failed because
// no broker could be reached.
var ErrUnreachable = errors.New("brokers unreachable")

// Explain rewrites franz-go's guess for a connection that a broker closed
// right after a request ("is SASL missing?", "is TLS misconfigured?")
// when the guess is wrong: the broker stopped or crashed. If no seed
// broker accepts a new TCP connection, the error says the brokers are
// unreachable, wraps ErrUnreachable and still unwraps to franz-go's
// error; otherwise (a broker that answers and then hangs up may indeed
// want TLS or SASL) err is returned as it is, as is any other error.
// Admin's methods explain their errors; a caller of franz-go clients made
// with NewClient can do the same with the errors it returns.
func (c Conn) Explain(err error) error {
	var eof *kgo.ErrFirstReadEOF
	if err == nil || !errors.As(err, &eof) {
		return err
	}
	brokers := c.Brokers
	if len(brokers) == 0 {
		brokers = []string{DefaultBrokers}
	}
	for _, b := range brokers {
		if conn, derr := net.DialTimeout("tcp", b, time.Second); derr == nil {
			conn.Close()
			return err
		}
	}
	return &unreachableError{brokers: brokers, err: err}
}

type unreachableError struct {
	brokers []string
	err     error
}

func (e *unreachableError) Error() string {
	return fmt.Sprintf("broker %s unreachable: the connection closed during the request and a new one is refused: is the broker running?",
		strings.Join(e.brokers, ","))
}

func (e *unreachableError) Unwrap() []error { return []error{ErrUnreachable, e.err} }
