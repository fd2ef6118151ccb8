package research_test

import (
	"bytes"
	"fmt"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"golang.org/x/net/html"

	"github.com/aetherium-engine/aetherium/toolbox/research"
)

// FuzzHTMLText: any bytes as a page give valid UTF-8 text with no markup of the
// skipped elements, and every footnote number in the text is listed.
func FuzzHTMLText(f *testing.F) {
	f.Add([]byte(`<p>a <a href="/x">b</a></p><script>evil()</script>`))
	f.Add([]byte(`<ul><li>one<ol><li>two</li></ol></li></ul><blockquote><blockquote>q</blockquote></blockquote>`))
	f.Add([]byte(`<table><tr><th>h</th><td>d</td></tr></table><pre>  x
 y</pre><h7>no</h7><h1></h1>`))
	f.Add([]byte("<a href='http://[::1'>bad</a><a href='https://ok.test/#f'>ok</a>\xff\xfe"))
	f.Add([]byte(strings.Repeat("<div>", 2000) + "deep" + strings.Repeat("</div>", 2000)))
	base, _ := url.Parse("https://page.test/dir/")
	f.Fuzz(func(t *testing.T, page []byte) {
		doc, err := html.Parse(bytes.NewReader(page))
		if err != nil {
			return
		}
		out := research.HTMLText(doc, base)
		if !utf8.ValidString(strings.ToValidUTF8(out, "")) {
			t.Fatalf("invalid text")
		}
		body, links, _ := strings.Cut(out, "\n\nLinks:\n")
		for i := 1; strings.Contains(body, fmt.Sprintf("[%d]", i)); i++ {
			if !strings.Contains(links, fmt.Sprintf("[%d] http", i)) && !bytes.Contains(page, fmt.Appendf(nil, "[%d]", i)) {
				t.Fatalf("footnote [%d] is not listed:\n%s", i, out)
			}
		}
		if strings.Contains(out, "\n\n\n") {
			t.Fatalf("three newlines in a row:\n%q", out)
		}
	})
}

// BenchmarkWebFetchText: the text of an article (readability, then the renderer),
// the CPU web_fetch spends on a page once downloaded. Goal for 1 MiB: ≤ 50 ms of
// CPU (the cpu-ms/op metric; wall time varies with the machine's load).
func BenchmarkWebFetchText(b *testing.B) {
	for _, size := range []int{64 << 10, 1 << 20} {
		raw := articleOf(size)
		base, _ := url.Parse("https://big.test/a")
		b.Run(fmt.Sprintf("%d KiB", size>>10), func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			b.ReportAllocs()
			cpu0 := cpuTime()
			for b.Loop() {
				if _, _, err := research.Readable(raw, "text/html; charset=utf-8", base); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/1000/float64(b.N), "cpu-ms/op")
		})
	}
}

// articleOf is an article page of about size bytes: sections of headings,
// paragraphs with links, lists and inline scripts.
func articleOf(size int) []byte {
	var page strings.Builder
	page.WriteString(`<html><head><title>Big</title><style>p{}</style></head><body><nav><a href="/">home</a></nav><article><h1>Big</h1>`)
	for i := 0; page.Len() < size; i++ {
		fmt.Fprintf(&page, `<h2>Section %d</h2><p>Paragraph %d of a long article, with <a href="/p/%d">a link</a>, commas, and enough words to score as content for the readability pass. `+
			`Workers pull tasks, run loops, persist answers and move on.</p><ul><li>item %d</li><li>item %d</li></ul><script>var x=%d</script>`, i, i, i, i, i+1, i)
	}
	page.WriteString(`</article><footer>f</footer></body></html>`)
	return []byte(page.String())
}

// cpuTime is the process's user+system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
