package harness

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// Netns is a network namespace joined to the root namespace by a veth pair: a
// process started in it reaches the host only through HostAddr, so taking the
// link down partitions it from everything else on the machine.
type Netns struct {
	Name string
	// HostIf and NsIf are the veth ends; HostAddr and NsAddr their addresses in
	// Subnet (a /30).
	HostIf, NsIf     string
	HostAddr, NsAddr string
	Subnet           string
}

// NewNetns creates the namespace and the veth pair (it needs root and iproute2).
// id keeps names and the subnet apart from other drills'; a leftover of the same
// name (a drill killed before its cleanup) is removed first. On error nothing is
// left behind.
func NewNetns(id int) (*Netns, error) {
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, fmt.Errorf("iproute2 (ip) is not installed: %w", err)
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("a network namespace needs root (euid %d)", os.Geteuid())
	}
	id %= 16000
	n := &Netns{
		Name: fmt.Sprintf("aeth-drill-%d", id), HostIf: fmt.Sprintf("adh%d", id), NsIf: fmt.Sprintf("adn%d", id),
		// 10.213.0.0/16 cut into /30s: 16384 of them.
		HostAddr: fmt.Sprintf("10.213.%d.%d", id/64, id%64*4+1), NsAddr: fmt.Sprintf("10.213.%d.%d", id/64, id%64*4+2),
		Subnet: fmt.Sprintf("10.213.%d.%d/30", id/64, id%64*4),
	}
	n.Remove()
	steps := [][]string{
		{"netns", "add", n.Name},
		{"link", "add", n.HostIf, "type", "veth", "peer", "name", n.NsIf},
		{"link", "set", n.NsIf, "netns", n.Name},
		{"addr", "add", n.HostAddr + "/30", "dev", n.HostIf},
		{"link", "set", n.HostIf, "up"},
		{"-n", n.Name, "addr", "add", n.NsAddr + "/30", "dev", n.NsIf},
		{"-n", n.Name, "link", "set", n.NsIf, "up"},
		{"-n", n.Name, "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if err := ip(s...); err != nil {
			n.Remove()
			return nil, err
		}
	}
	return n, nil
}

func ip(args ...string) error {
	if raw, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(raw)))
	}
	return nil
}

// Cut takes the host end of the link down. The namespace keeps its route, so its
// packets are dropped rather than refused: connections hang and new ones wait
// for a SYN-ACK, as across a real partition, instead of failing at once.
func (n *Netns) Cut() error { return ip("link", "set", n.HostIf, "down") }

// Restore brings the host end back up (its address and route come back with it).
func (n *Netns) Restore() error { return ip("link", "set", n.HostIf, "up") }

// Exec is the command prefix that runs a program inside the namespace.
func (n *Netns) Exec() []string { return []string{"ip", "netns", "exec", n.Name} }

// Remove deletes the namespace (which deletes its veth end, and with it the
// pair) and the host end should it remain. Errors are ignored: it is cleanup,
// also of what may not exist.
func (n *Netns) Remove() {
	_ = ip("netns", "del", n.Name)
	_ = ip("link", "del", n.HostIf)
}
