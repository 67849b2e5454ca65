//go:build linux

package sandbox

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// The registry records, for every live Run, the placeholder files it
// created on the host and its run directory, in one small JSON file per run,
// under an flock. A placeholder shared by concurrent runs (same project) is
// removed by the last one; records left by a killed moat (kill -9) are found
// by their dead pid and cleaned by the next Run.
type registry struct{ dir string }

type record struct {
	Pid          int
	Start        string // /proc/PID/stat start time: pids are reused
	RunDir       string
	Placeholders []string
	file         string
}

func openRegistry() *registry {
	if os.Geteuid() == 0 {
		return &registry{dir: "/run/moat/runs"}
	}
	if x := os.Getenv("XDG_RUNTIME_DIR"); x != "" {
		return &registry{dir: filepath.Join(x, "moat", "runs")}
	}
	return &registry{dir: filepath.Join(os.TempDir(), "moat-"+strconv.Itoa(os.Getuid()), "runs")}
}

func (r *registry) lock() (func(), error) {
	if err := os.MkdirAll(r.dir, 0o700); err != nil {
		return nil, err
	}
	// The records say what to delete: in a shared /tmp another user could
	// pre-create the directory and plant them. Trust only our own 0700 dir.
	for d := r.dir; d != filepath.Dir(d) && strings.Contains(d, "moat"); d = filepath.Dir(d) {
		fi, err := os.Lstat(d)
		if err != nil {
			return nil, err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !fi.IsDir() || (ok && int(st.Uid) != os.Getuid()) || fi.Mode().Perm()&0o022 != 0 {
			return nil, fmt.Errorf("registry %s is not a private directory of yours (remove it to let moat recreate it)", d)
		}
	}
	f, err := os.OpenFile(filepath.Join(r.dir, ".lock"), os.O_CREATE|os.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { _ = unix.Flock(int(f.Fd()), unix.LOCK_UN); f.Close() }, nil
}

func procStart(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		f := strings.Fields(s[i+1:])
		if len(f) > 19 {
			return f[19] // field 22 of stat(5): starttime
		}
	}
	return ""
}

// others loads every record but own, cleaning the stale ones (dead owner).
func (r *registry) others(own string) []*record {
	ents, _ := os.ReadDir(r.dir)
	var live, stale []*record
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") || e.Name() == own {
			continue
		}
		p := filepath.Join(r.dir, e.Name())
		b, err := os.ReadFile(p)
		var rec record
		if err != nil || json.Unmarshal(b, &rec) != nil {
			continue
		}
		rec.file = p
		if st := procStart(rec.Pid); st != "" && st == rec.Start {
			live = append(live, &rec)
		} else {
			stale = append(stale, &rec)
		}
	}
	for _, s := range stale {
		removePlaceholders(s.Placeholders, live)
		if s.RunDir != "" && strings.HasPrefix(filepath.Base(s.RunDir), "moat-run-") && filepath.Dir(s.RunDir) == filepath.Clean(os.TempDir()) {
			_ = os.RemoveAll(s.RunDir)
		}
		_ = os.Remove(s.file)
	}
	return live
}

// acquire, under the registry lock, calls plan with the placeholders that
// other live runs hold (so the plan treats them as placeholders to share,
// not as real files that may vanish), then writes rec (before creating
// anything, so a crash leaves a trace) and creates the missing placeholders.
func (r *registry) acquire(rec *record, plan func(shared map[string]bool) ([]string, error)) error {
	unlock, err := r.lock()
	if err != nil {
		return err
	}
	defer unlock()
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	rec.Pid = os.Getpid()
	rec.Start = procStart(rec.Pid)
	name := strconv.Itoa(rec.Pid) + "-" + hex.EncodeToString(rnd[:]) + ".json"
	rec.file = filepath.Join(r.dir, name)
	live := r.others(name)
	shared := map[string]bool{}
	for _, l := range live {
		for _, p := range l.Placeholders {
			shared[p] = true
		}
	}
	placeholders, err := plan(shared)
	if err != nil {
		return err
	}
	var mine, create []string
	for _, p := range placeholders {
		if _, err := os.Lstat(p); err == nil {
			if shared[p] {
				mine = append(mine, p) // another run's placeholder: share it
			}
			continue // otherwise a real file appeared: it is not ours to remove
		}
		mine = append(mine, p)
		create = append(create, p)
	}
	rec.Placeholders = mine
	if err := r.write(rec); err != nil {
		return err
	}
	for _, p := range create {
		f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY|unix.O_CLOEXEC, 0o444)
		if err != nil {
			return err
		}
		f.Close()
	}
	return nil
}

func (r *registry) write(rec *record) error {
	b, _ := json.Marshal(rec)
	tmp := rec.file + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, rec.file)
}

// release removes rec and the placeholders no other live run still uses.
func (r *registry) release(rec *record) {
	if rec.file == "" {
		return
	}
	unlock, err := r.lock()
	if err != nil {
		return
	}
	defer unlock()
	live := r.others(filepath.Base(rec.file))
	removePlaceholders(rec.Placeholders, live)
	_ = os.Remove(rec.file)
}

// removePlaceholders deletes each placeholder that no live record lists and
// that is still an empty regular file (never something a user put there).
func removePlaceholders(ps []string, live []*record) {
	used := map[string]bool{}
	for _, l := range live {
		for _, p := range l.Placeholders {
			used[p] = true
		}
	}
	for _, p := range ps {
		if used[p] {
			continue
		}
		if fi, err := os.Lstat(p); err == nil && fi.Mode().IsRegular() && fi.Size() == 0 {
			_ = os.Remove(p)
		}
	}
}
