// Package pdftest writes the PDF fixtures of download_pdf's tests by hand: a valid
// multi-page document, a corrupt one, a decompression bomb and an oversized one.
// Nothing is copied from elsewhere; PDF's syntax is small enough to write here
// (a catalog, a page tree, a font, content streams, and the cross-reference table
// with every object's byte offset).
package pdftest

import (
	"bytes"
	"compress/zlib"
	"fmt"
	"strings"
	"sync"
)

// writer numbers objects and remembers where each starts, for the xref table.
type writer struct {
	buf     bytes.Buffer
	offsets []int // offsets[i] is object i+1's
}

func (w *writer) object(body string) int {
	w.offsets = append(w.offsets, w.buf.Len())
	n := len(w.offsets)
	fmt.Fprintf(&w.buf, "%d 0 obj\n%s\nendobj\n", n, body)
	return n
}

// stream writes a stream object with the given dictionary entries.
func (w *writer) stream(dict string, data []byte) int {
	w.offsets = append(w.offsets, w.buf.Len())
	n := len(w.offsets)
	fmt.Fprintf(&w.buf, "%d 0 obj\n<< /Length %d %s>>\nstream\n", n, len(data), dict)
	w.buf.Write(data)
	w.buf.WriteString("\nendstream\nendobj\n")
	return n
}

// reserve takes an object number whose body is written later with fill.
func (w *writer) reserve() int {
	w.offsets = append(w.offsets, -1)
	return len(w.offsets)
}

func (w *writer) fill(n int, body string) {
	w.offsets[n-1] = w.buf.Len()
	fmt.Fprintf(&w.buf, "%d 0 obj\n%s\nendobj\n", n, body)
}

// finish writes the xref table (entries of exactly 20 bytes) and the trailer.
func (w *writer) finish(root int) []byte {
	xref := w.buf.Len()
	fmt.Fprintf(&w.buf, "xref\n0 %d\n0000000000 65535 f \n", len(w.offsets)+1)
	for _, off := range w.offsets {
		fmt.Fprintf(&w.buf, "%010d 00000 n \n", off)
	}
	fmt.Fprintf(&w.buf, "trailer\n<< /Size %d /Root %d 0 R >>\nstartxref\n%d\n%%%%EOF\n", len(w.offsets)+1, root, xref)
	return w.buf.Bytes()
}

func newWriter() *writer {
	w := &writer{}
	// The binary comment tells transfer tools the file is not text.
	w.buf.WriteString("%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
	return w
}

// escape makes s a PDF literal string's content (ASCII text).
func escape(s string) string {
	return strings.NewReplacer(`\`, `\\`, "(", `\(`, ")", `\)`).Replace(s)
}

// content is a page's text, one line after another from the top left.
func content(lines []string) []byte {
	var b bytes.Buffer
	b.WriteString("BT\n/F1 12 Tf\n16 TL\n72 720 Td\n")
	for _, l := range lines {
		fmt.Fprintf(&b, "(%s) Tj T*\n", escape(l))
	}
	b.WriteString("ET")
	return b.Bytes()
}

// document writes pages whose content streams are given (with their filter
// entries), sharing one Helvetica font.
func document(streams [][]byte, dict string, extra func(*writer)) []byte {
	w := newWriter()
	catalog := w.reserve()
	pagesObj := w.reserve()
	font := w.object("<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>")
	var kids []string
	for _, s := range streams {
		c := w.stream(dict, s)
		p := w.object(fmt.Sprintf("<< /Type /Page /Parent %d 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 %d 0 R >> >> /Contents %d 0 R >>", pagesObj, font, c))
		kids = append(kids, fmt.Sprintf("%d 0 R", p))
	}
	if extra != nil {
		extra(w)
	}
	w.fill(pagesObj, fmt.Sprintf("<< /Type /Pages /Kids [%s] /Count %d >>", strings.Join(kids, " "), len(kids)))
	w.fill(catalog, fmt.Sprintf("<< /Type /Catalog /Pages %d 0 R >>", pagesObj))
	return w.finish(catalog)
}

// Document is a valid PDF with one page per element of pages, each page's lines
// written in Helvetica (ASCII text).
func Document(pages ...[]string) []byte {
	streams := make([][]byte, len(pages))
	for i, p := range pages {
		streams[i] = content(p)
	}
	return document(streams, "", nil)
}

// Corrupt starts like a PDF and then is not one: a header, a broken object and
// bytes that hold no catalog, no cross-reference table and no trailer.
func Corrupt() []byte {
	var b bytes.Buffer
	b.WriteString("%PDF-1.7\n1 0 obj\n<< /Type /Catalog /Pages 2 0 R\nstream\n")
	for i := range 2048 {
		b.WriteByte(byte(i*7919 + i/3))
	}
	b.WriteString("\nendobj\nstartxref\n999999\n%%EOF\n")
	return b.Bytes()
}

var (
	bombMu sync.Mutex
	bombs  = map[int64][]byte{}
)

// Bomb is a valid PDF of one page whose FlateDecode content stream inflates to
// inflated bytes of text operators (a few hundred KiB on the wire for hundreds of
// MiB inflated): parsing it needs far more time and memory than its size says.
// Built once per size per process (about a second and a half for 256 MiB).
func Bomb(inflated int64) []byte {
	bombMu.Lock()
	defer bombMu.Unlock()
	if b, ok := bombs[inflated]; ok {
		return b
	}
	var z bytes.Buffer
	zw := zlib.NewWriter(&z)
	_, _ = zw.Write([]byte("BT\n/F1 12 Tf\n"))
	// Two lines in turn: the text stays on the page, and no character lands on
	// the one before it (a reader drops such duplicates), so every one is kept.
	line := []byte("1 0 0 1 72 720 Tm (AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA) Tj 1 0 0 1 72 700 Tm (BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB) Tj\n")
	chunk := bytes.Repeat(line, (1<<20)/len(line))
	for n := int64(0); n < inflated; n += int64(len(chunk)) {
		_, _ = zw.Write(chunk)
	}
	_, _ = zw.Write([]byte("ET"))
	_ = zw.Close()
	b := document([][]byte{z.Bytes()}, "/Filter /FlateDecode ", nil)
	bombs[inflated] = b
	return b
}

// Oversized is a valid one-page PDF padded (an unused stream object) to at least
// size bytes.
func Oversized(size int) []byte {
	return document([][]byte{content([]string{"padded document"})}, "", func(w *writer) {
		w.stream("", bytes.Repeat([]byte("0123456789abcdef\n"), size/17+1))
	})
}
