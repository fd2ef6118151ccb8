package fleettest

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// DNS starts a DNS server on loopback that answers A queries from table (name →
// IPv4 address) and every other question with NXDOMAIN, and returns a resolver that
// asks only it. Tests map made-up names to 127.0.0.1 with it, so outbound tools can
// be exercised by host name without a packet leaving the machine.
func DNS(t testing.TB, table map[string]string) *net.Resolver {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("dns: %v", err)
	}
	t.Cleanup(func() { _ = pc.Close() })
	answers := map[string][4]byte{}
	for name, ip := range table {
		a, err := netip.ParseAddr(ip)
		if err != nil || !a.Is4() {
			t.Fatalf("dns: %s: want an IPv4 address, got %q", name, ip)
		}
		answers[strings.ToLower(strings.TrimSuffix(name, "."))] = a.As4()
	}
	go serveDNS(pc, answers)
	addr := pc.LocalAddr().String()
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", addr)
	}}
}

func serveDNS(pc net.PacketConn, answers map[string][4]byte) {
	buf := make([]byte, 1500)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		var q dnsmessage.Message
		if err := q.Unpack(buf[:n]); err != nil || len(q.Questions) == 0 {
			continue
		}
		question := q.Questions[0]
		reply := dnsmessage.Message{
			Header:    dnsmessage.Header{ID: q.ID, Response: true, Authoritative: true, RecursionDesired: q.RecursionDesired, RecursionAvailable: true},
			Questions: q.Questions,
		}
		ip, known := answers[strings.ToLower(strings.TrimSuffix(question.Name.String(), "."))]
		switch {
		case !known:
			reply.RCode = dnsmessage.RCodeNameError
		case question.Type == dnsmessage.TypeA:
			reply.Answers = []dnsmessage.Resource{{
				Header: dnsmessage.ResourceHeader{Name: question.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 1},
				Body:   &dnsmessage.AResource{A: ip},
			}}
		}
		out, err := reply.Pack()
		if err != nil {
			continue
		}
		_, _ = pc.WriteTo(out, from)
	}
}
