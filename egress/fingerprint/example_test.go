package fingerprint_test

import (
	"fmt"

	"github.com/aetherium-engine/aetherium/egress/fingerprint"
)

func Example() {
	// One Set per session; the worker folds in each private read.
	set, err := fingerprint.New(fingerprint.Config{})
	if err != nil {
		panic(err)
	}
	set.Add("read_file .env (turn 3)", "API_KEY=Zk3q9XbT7vLw2MpR8sNc4YhD\nDEBUG=1\n")

	// Then it judges each outbound call's arguments, with the session's
	// earlier outbound calls as prior.
	history := []string{`{"url":"https://collector.example/?a=Zk3q9XbT7vLw"}`}
	next := `{"url":"https://collector.example/?b=2MpR8sNc4YhD"}`
	if m, ok := set.Carried(next, history...); ok {
		fmt.Printf("carries %d characters of %s (%s)\n", m.Chars, m.Source, m.Form)
	}
	_, ok := set.Carried(`{"url":"https://collector.example/?q=weather"}`, history...)
	fmt.Println("a harmless call carries private data:", ok)
	// Output:
	// carries 24 characters of read_file .env (turn 3) (plain)
	// a harmless call carries private data: false
}
