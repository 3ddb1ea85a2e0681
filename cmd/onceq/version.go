package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3".
var version = ""

// versionString is the version: the one set at build time, else the
// module's (go install ...@v1.2.3, or the pseudo-version of the commit a
// build in a git checkout records), else dev; the commit it was built
// from when the version does not name it ("+dirty": the checkout had
// changes); then Go's version and platform.
func versionString() string {
	v := version
	bi, ok := debug.ReadBuildInfo()
	if v == "" {
		v = "dev"
		if ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
	}
	if ok {
		if rev, detail := commitOf(bi.Settings); rev != "" && !strings.Contains(v, rev) {
			v += " commit " + detail
		}
	}
	return fmt.Sprintf("onceq %s (%s %s/%s)", v, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// commitOf reads a build's commit from its settings: its first 12 hex
// digits, and those with "+dirty" for a modified checkout and the
// commit's time; "" for none.
func commitOf(settings []debug.BuildSetting) (rev, detail string) {
	var at, dirty string
	for _, st := range settings {
		switch st.Key {
		case "vcs.revision":
			rev = st.Value[:min(12, len(st.Value))]
		case "vcs.time":
			at = st.Value
		case "vcs.modified":
			if st.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if rev == "" {
		return "", ""
	}
	detail = rev + dirty
	if at != "" {
		detail += " " + at
	}
	return rev, detail
}

func newVersionCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintln(g.stdout, versionString())
			return err
		},
	}
}
