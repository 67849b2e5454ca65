package resolver

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"
)

// hostsCheckInterval bounds how often Lookup stats the hosts file: a change
// is picked up within this time, and a busy gateway costs one stat a second.
const hostsCheckInterval = time.Second

// maxHostsSize bounds how much of a hosts file is read, so that a huge or
// endless file (say, a FIFO or /dev/zero by mistake) cannot exhaust memory.
const maxHostsSize = 16 << 20

// hostsTable maps a canonical name to its addresses, in file order.
type hostsTable map[string][]netip.Addr

// parseHosts parses hosts(5) text: "ADDR NAME [ALIAS...]" lines, '#' starts a
// comment. Names are lower-cased and lose one trailing dot, addresses lose any
// zone and are unmapped, so that lookups compare canonical forms. Lines with
// an unparsable address are skipped, as glibc does.
func parseHosts(data []byte) hostsTable {
	t := hostsTable{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		a, err := netip.ParseAddr(f[0])
		if err != nil {
			continue
		}
		a = a.WithZone("").Unmap()
		for _, n := range f[1:] {
			n = strings.ToLower(strings.TrimSuffix(n, "."))
			if !validName(n) {
				continue // Lookup could never ask for it
			}
			if !containsAddr(t[n], a) {
				t[n] = append(t[n], a)
			}
		}
	}
	// A line longer than the buffer ends the scan; what was read stands.
	return t
}

func containsAddr(as []netip.Addr, a netip.Addr) bool {
	for _, b := range as {
		if a == b {
			return true
		}
	}
	return false
}

// hostsFile is a hosts file that is re-read when its modification time or
// size changes.
type hostsFile struct {
	path  string
	every time.Duration // stat at most this often

	mu        sync.Mutex
	table     hostsTable
	modTime   time.Time
	size      int64
	lastCheck time.Time
}

func newHostsFile(path string) (*hostsFile, error) {
	h := &hostsFile{path: path, every: hostsCheckInterval}
	if err := h.reload(time.Now(), true); err != nil {
		return nil, err
	}
	return h, nil
}

// lookup returns the addresses of name, re-reading the file first if it may
// have changed. A nil result means the name is not in the file.
func (h *hostsFile) lookup(name string) []netip.Addr {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	if now.Sub(h.lastCheck) >= h.every {
		// A read error keeps the previous table: a transient failure
		// should not make hosts-only names suddenly go to DNS.
		_ = h.reload(now, false)
	}
	return h.table[name]
}

// reload re-reads the file if its mtime or size changed (or force is set).
// A missing file is an empty table. The caller holds h.mu, or h is not yet
// shared.
func (h *hostsFile) reload(now time.Time, force bool) error {
	h.lastCheck = now
	fi, err := os.Stat(h.path)
	if errors.Is(err, fs.ErrNotExist) {
		h.table, h.modTime, h.size = hostsTable{}, time.Time{}, 0
		return nil
	}
	if err != nil {
		return err
	}
	if !force && h.table != nil && fi.ModTime().Equal(h.modTime) && fi.Size() == h.size {
		return nil
	}
	data, err := readLimited(h.path, maxHostsSize)
	if err != nil {
		return err
	}
	h.table, h.modTime, h.size = parseHosts(data), fi.ModTime(), fi.Size()
	return nil
}

// readLimited reads at most limit bytes of path; a longer file is an error
// rather than a silently truncated table.
func readLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, limit)
	}
	return data, nil
}
