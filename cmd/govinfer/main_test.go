package main

import (
	"os"
	"testing"
)

// asBinary, set in the environment, makes the test binary run as govinfer
// itself (main with the arguments it was given), so that tests can run the
// command in a process of its own, on a pseudo-terminal.
const asBinary = "GOVINFER_TEST_AS_BINARY"

func TestMain(m *testing.M) {
	if os.Getenv(asBinary) == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}
