package consumertest_test

import (
	"os"
	"strings"
	"testing"
)

// TestKitReadmeExample keeps the "Testing handlers" example of
// docs/operations.md (linked from the README) the code of Example, so the
// documented example is tested.
func TestKitReadmeExample(t *testing.T) {
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, body, ok := strings.Cut(string(src), "func Example() {\n")
	if !ok {
		t.Fatal("example_test.go has no func Example")
	}
	body, _, _ = strings.Cut(body, "\n}\n")
	var b strings.Builder
	for _, line := range strings.Split(body, "\n") {
		b.WriteString(strings.TrimPrefix(line, "\t"))
		b.WriteString("\n")
	}
	if !strings.Contains(string(readme), "```go\n"+b.String()+"```\n") {
		t.Fatalf("docs/operations.md's Testing handlers example is not Example's body; want:\n%s", b.String())
	}
}
