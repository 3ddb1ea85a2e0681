package kafkatest

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
)

// DefaultVersion is the Kafka version Start runs when Config.Version is
// empty.
const DefaultVersion = "4.4.0"

//go:embed pom.xml
var pom []byte

// jarsDone marks a complete classpath directory: Jars writes it last.
const jarsDone = ".complete"

var versionRE = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`)

// CacheDir is where Jars keeps version's classpath:
// $ONCEQ_KAFKA_CACHE/<version>, else <user cache dir>/onceq/kafka/<version>
// ($XDG_CACHE_HOME or ~/.cache on Linux).
func CacheDir(version string) (string, error) {
	if dir := os.Getenv("ONCEQ_KAFKA_CACHE"); dir != "" {
		return filepath.Join(dir, version), nil
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("kafkatest: no cache directory (%w): set ONCEQ_KAFKA_CACHE", err)
	}
	return filepath.Join(base, "onceq", "kafka", version), nil
}

// Jars returns the directory that holds Kafka version's broker and its
// runtime dependencies, with the logging backend, for java -cp 'DIR/*'.
// The first call for a version runs Maven (mvn dependency:copy-dependencies
// on this package's pom.xml), telling log what it does; later ones, from
// this process or another, find the directory complete. Concurrent calls
// wait for each other through a lock file.
func Jars(ctx context.Context, version string, log io.Writer) (string, error) {
	if !versionRE.MatchString(version) {
		return "", fmt.Errorf("kafkatest: Kafka version %q: want major.minor.patch, for example %s", version, DefaultVersion)
	}
	dir, err := CacheDir(version)
	if err != nil {
		return "", err
	}
	if complete(dir) {
		return dir, nil
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", fmt.Errorf("kafkatest: %w", err)
	}
	lock, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", fmt.Errorf("kafkatest: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("kafkatest: locking %s: %w", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck // closed next
	if complete(dir) {                                   // another process fetched it meanwhile
		return dir, nil
	}
	if _, err := exec.LookPath("mvn"); err != nil {
		return "", fmt.Errorf("kafkatest: Kafka %s is not in %s and Maven (mvn) is not installed to fetch it: install maven", version, dir)
	}
	tmp := dir + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return "", fmt.Errorf("kafkatest: %w", err)
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return "", fmt.Errorf("kafkatest: %w", err)
	}
	pomPath := filepath.Join(tmp, "pom.xml")
	if err := os.WriteFile(pomPath, pom, 0o644); err != nil {
		return "", fmt.Errorf("kafkatest: %w", err)
	}
	jars := filepath.Join(tmp, "jars")
	fmt.Fprintf(log, "kafkatest: fetching Kafka %s with Maven into %s\n", version, dir)
	cmd := exec.CommandContext(ctx, "mvn", "-q", "-B", "-f", pomPath, "-Dkafka.version="+version,
		"dependency:copy-dependencies", "-DincludeScope=runtime", "-DoutputDirectory="+jars)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("kafkatest: fetching Kafka %s with Maven: %w\n%s", version, err, tail(string(out), 30))
	}
	if _, err := os.Stat(filepath.Join(jars, "kafka_2.13-"+version+".jar")); err != nil {
		return "", fmt.Errorf("kafkatest: Maven ran but %s holds no kafka_2.13-%s.jar", jars, version)
	}
	if err := os.WriteFile(filepath.Join(jars, jarsDone), nil, 0o644); err != nil {
		return "", fmt.Errorf("kafkatest: %w", err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return "", fmt.Errorf("kafkatest: %w", err)
	}
	if err := os.Rename(jars, dir); err != nil {
		return "", fmt.Errorf("kafkatest: %w", err)
	}
	_ = os.RemoveAll(tmp)
	return dir, nil
}

func complete(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, jarsDone))
	return err == nil
}

// javaPath is $JAVA_HOME/bin/java if JAVA_HOME is set, else java on PATH.
func javaPath() (string, error) {
	if home := os.Getenv("JAVA_HOME"); home != "" {
		p := filepath.Join(home, "bin", "java")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath("java")
	if err != nil {
		return "", errors.New("kafkatest: no java on PATH (and no $JAVA_HOME/bin/java): install a JDK of version 17 or later")
	}
	return p, nil
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
