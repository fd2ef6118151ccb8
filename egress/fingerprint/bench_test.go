package fingerprint

import (
	"encoding/base64"
	"math/rand/v2"
	"net/url"
	"runtime"
	"sync"
	"syscall"
	"testing"
)

// cpuTime is the CPU time the process has used, in nanoseconds: on a shared
// machine the wall time per op also counts the waits for a core, the CPU time
// less so.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// private10MiB is 10 MiB of generated private reads (code, prose, .env
// files) in reads of about 16 KiB, and the vocabulary the outbound texts share.
var private10MiB = sync.OnceValues(func() ([]string, []string) {
	r := rand.New(rand.NewPCG(10, 10))
	words := vocab(r, 5000)
	return privateCorpus(r, words, 10<<20), words
})

func newSet10MiB(tb testing.TB) *Set {
	reads, _ := private10MiB()
	s, err := New(Config{})
	if err != nil {
		tb.Fatal(err)
	}
	for _, p := range reads {
		s.Add("read_file", p)
	}
	return s
}

var set10MiB = sync.OnceValue(func() *Set { return newSet10MiB(nil) })

// BenchmarkAdd10MiB folds 10 MiB of private reads into a new Set; it reports
// the Set's heap per MiB of private text and its fingerprints.
func BenchmarkAdd10MiB(b *testing.B) {
	reads, _ := private10MiB()
	total := 0
	for _, p := range reads {
		total += len(p)
	}
	b.SetBytes(int64(total))
	b.ReportAllocs()
	var s *Set
	for b.Loop() {
		s = newSet10MiB(b)
	}
	b.StopTimer()
	var before, after runtime.MemStats
	s = nil
	runtime.GC()
	runtime.ReadMemStats(&before)
	s = newSet10MiB(b)
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(float64(total)/(1<<20)), "heap-B/MiB")
	b.ReportMetric(float64(s.Size()), "fingerprints")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(total), "ns/byte")
	runtime.KeepAlive(s)
}

// BenchmarkCarried64KiB judges 64 KiB outbound texts against the 10 MiB Set.
func BenchmarkCarried64KiB(b *testing.B) {
	s := set10MiB()
	reads, words := private10MiB()
	r := rand.New(rand.NewPCG(64, 64))
	blob := make([]byte, 48<<10)
	for i := range blob {
		blob[i] = byte(r.Uint32())
	}
	copied := ""
	for _, p := range reads {
		if len(copied) < 64<<10 {
			copied += p
		}
	}
	prior := []string{args(prose(r, words, 64<<10)), args(goCode(r, words, 64<<10)), args(prose(r, words, 64<<10)), args(goCode(r, words, 64<<10))}
	for _, c := range []struct {
		name  string
		text  string
		prior []string
		match bool
	}{
		{"prose", args(prose(r, words, 64<<10)), nil, false},
		{"code", args(goCode(r, words, 64<<10)), nil, false},
		{"base64-blob", args(base64.StdEncoding.EncodeToString(blob)), nil, false},
		{"percent-encoded", "https://c.example/?q=" + url.QueryEscape(prose(r, words, 48<<10)), nil, false},
		{"copied-private", args(copied[:64<<10]), nil, true},
		{"prose+4x64KiB-prior", args(prose(r, words, 64<<10)), prior, false},
	} {
		if _, ok := s.Carried(c.text, c.prior...); ok != c.match {
			b.Fatalf("%s: Carried = %v, want %v", c.name, ok, c.match)
		}
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.text)))
			b.ReportAllocs()
			cpu0 := cpuTime()
			for b.Loop() {
				s.Carried(c.text, c.prior...)
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N)/1e6, "cpu-ms/op")
		})
	}
}
