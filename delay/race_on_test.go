//go:build race

package delay_test

const raceEnabled = true
