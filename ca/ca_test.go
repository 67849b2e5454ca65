package ca

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestLoadOrCreateRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "moat", "ca")
	a, err := LoadOrCreate(dir)
	if err != nil {
		t.Fatalf("LoadOrCreate(new) = %v", err)
	}
	for name, want := range map[string]os.FileMode{".": 0o700, KeyFile: 0o600} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("mode of %s = %04o, want %04o", name, got, want)
		}
	}
	if !a.Certificate().IsCA || a.Certificate().PublicKeyAlgorithm != x509.ECDSA {
		t.Errorf("created CA: IsCA=%v alg=%v, want a CA with an ECDSA key", a.Certificate().IsCA, a.Certificate().PublicKeyAlgorithm)
	}
	keyBefore, _ := os.ReadFile(filepath.Join(dir, KeyFile))

	b, err := LoadOrCreate(dir)
	if err != nil {
		t.Fatalf("LoadOrCreate(existing) = %v", err)
	}
	if !bytes.Equal(a.CertPEM(), b.CertPEM()) {
		t.Error("second LoadOrCreate returned a different CA; want the stored one")
	}
	keyAfter, _ := os.ReadFile(filepath.Join(dir, KeyFile))
	if !bytes.Equal(keyBefore, keyAfter) {
		t.Error("second LoadOrCreate rewrote the key")
	}
	// A leaf from the reloaded CA verifies against the first one.
	verifyLeaf(t, b, a.Pool(), "example.com")

	c, err := Load(filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile))
	if err != nil {
		t.Fatalf("Load = %v", err)
	}
	if !bytes.Equal(a.CertPEM(), c.CertPEM()) {
		t.Error("Load returned a different CA")
	}
	if bytes.Contains(a.CertPEM(), []byte("PRIVATE")) {
		t.Error("CertPEM contains a private key block")
	}
}

func TestDefaultDir(t *testing.T) {
	x := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", x)
	got, err := DefaultDir()
	if want := filepath.Join(x, "moat", "ca"); err != nil || got != want {
		t.Errorf("DefaultDir() = %q, %v; want %q", got, err, want)
	}
	home := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", "")
	t.Setenv("HOME", home)
	got, err = DefaultDir()
	if want := filepath.Join(home, ".config", "moat", "ca"); err != nil || got != want {
		t.Errorf("DefaultDir() without XDG = %q, %v; want %q", got, err, want)
	}
}

func TestLoosePermissionsRefused(t *testing.T) {
	dir := t.TempDir()
	if _, err := LoadOrCreate(dir); err != nil {
		t.Fatal(err)
	}
	keyPath := filepath.Join(dir, KeyFile)
	for _, mode := range []os.FileMode{0o640, 0o604, 0o660, 0o644} {
		if err := os.Chmod(keyPath, mode); err != nil {
			t.Fatal(err)
		}
		_, err := LoadOrCreate(dir)
		if !errors.Is(err, ErrKeyPermissions) {
			t.Errorf("mode %04o: LoadOrCreate = %v, want ErrKeyPermissions", mode, err)
			continue
		}
		if want := "chmod 600 " + keyPath; !strings.Contains(err.Error(), want) {
			t.Errorf("mode %04o: error %q does not say %q", mode, err, want)
		}
	}
	if err := os.Chmod(keyPath, 0o400); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreate(dir); err != nil {
		t.Errorf("mode 0400: LoadOrCreate = %v, want success", err)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := LoadOrCreate(dir); err != nil {
		t.Fatal(err)
	}
	certPath, keyPath := filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile)
	other := t.TempDir()
	if _, err := LoadOrCreate(other); err != nil {
		t.Fatal(err)
	}
	write := func(name, data string, mode os.FileMode) string {
		p := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(p, []byte(data), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const secret = "c2VjcmV0LWtleS1tYXRlcmlhbA=="
	garbageKey := write("garbage.key", "-----BEGIN PRIVATE KEY-----\n"+secret+"\n-----END PRIVATE KEY-----\n", 0o600)
	leafPEM := func() string {
		a, _ := Load(certPath, keyPath)
		l, err := a.Leaf("x.test")
		if err != nil {
			t.Fatal(err)
		}
		return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: l.Certificate[0]}))
	}()
	tests := []struct {
		name      string
		cert, key string
		wantIs    error
		wantPath  string
	}{
		{"missing cert", filepath.Join(dir, "nope.pem"), keyPath, fs.ErrNotExist, "nope.pem"},
		{"missing key", certPath, filepath.Join(dir, "nope.key"), fs.ErrNotExist, "nope.key"},
		{"cert not PEM", write("c.pem", "hello", 0o644), keyPath, ErrNoCertificate, "c.pem"},
		{"cert not a CA", write("leaf.pem", leafPEM, 0o644), keyPath, ErrNotCA, "leaf.pem"},
		{"key not PEM", certPath, write("k.pem", "hello", 0o600), ErrNoKey, "k.pem"},
		{"key garbage", certPath, garbageKey, nil, "garbage.key"},
		{"key of another CA", certPath, filepath.Join(other, KeyFile), ErrKeyMismatch, other},
		{"cert is a directory", dir, keyPath, nil, dir},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(tc.cert, tc.key)
			if err == nil {
				t.Fatal("Load succeeded, want an error")
			}
			if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Errorf("Load = %v, want errors.Is %v", err, tc.wantIs)
			}
			if !strings.Contains(err.Error(), tc.wantPath) {
				t.Errorf("Load error %q does not name %q", err, tc.wantPath)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("Load error %q leaks key material", err)
			}
		})
	}
}

func TestLoadOrCreatePartialRefused(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, CertFile), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreate(dir); err == nil {
		t.Fatal("LoadOrCreate with only cert.pem succeeded; want an error")
	}
	if _, err := os.Stat(filepath.Join(dir, KeyFile)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("LoadOrCreate wrote %s next to a foreign cert.pem", KeyFile)
	}
}

func newCA(t testing.TB) *Authority {
	t.Helper()
	a, err := LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func verifyLeaf(t *testing.T, a *Authority, roots *x509.CertPool, host string) *x509.Certificate {
	t.Helper()
	l, err := a.Leaf(host)
	if err != nil {
		t.Fatalf("Leaf(%q) = %v", host, err)
	}
	if len(l.Certificate) != 2 {
		t.Fatalf("Leaf(%q) chain has %d certificates, want leaf + CA", host, len(l.Certificate))
	}
	name := strings.Trim(strings.TrimSuffix(strings.ToLower(host), "."), "[]")
	if _, err := l.Leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: roots}); err != nil {
		t.Errorf("Leaf(%q) does not verify for %q: %v", host, name, err)
	}
	return l.Leaf
}

func TestLeafVerifies(t *testing.T) {
	a := newCA(t)
	tests := []struct {
		host            string
		wantDNS, wantIP int
	}{
		{"example.com", 1, 0},
		{"API.GitHub.com.", 1, 0},
		{"127.0.0.1", 0, 1},
		{"::1", 0, 1},
		{"[2001:db8::1]", 0, 1},
	}
	for _, tc := range tests {
		c := verifyLeaf(t, a, a.Pool(), tc.host)
		if len(c.DNSNames) != tc.wantDNS || len(c.IPAddresses) != tc.wantIP {
			t.Errorf("Leaf(%q) SANs: DNS %v IP %v, want %d DNS and %d IP", tc.host, c.DNSNames, c.IPAddresses, tc.wantDNS, tc.wantIP)
		}
		if d := c.NotAfter.Sub(c.NotBefore); d > LeafValidity+2*time.Hour {
			t.Errorf("Leaf(%q) valid for %v, want about %v", tc.host, d, LeafValidity)
		}
		if !c.NotBefore.Before(time.Now().Add(-30 * time.Minute)) {
			t.Errorf("Leaf(%q) NotBefore %v is not backdated", tc.host, c.NotBefore)
		}
	}
	// A leaf for one name must not verify for another.
	l, _ := a.Leaf("example.com")
	if _, err := l.Leaf.Verify(x509.VerifyOptions{DNSName: "evil.com", Roots: a.Pool()}); err == nil {
		t.Error("leaf for example.com verified for evil.com")
	}
	if _, err := a.Leaf(""); !errors.Is(err, ErrBadHost) {
		t.Errorf("Leaf(\"\") = %v, want ErrBadHost", err)
	}
}

func TestLeafCached(t *testing.T) {
	a := newCA(t)
	first, err := a.Leaf("example.com")
	if err != nil {
		t.Fatal(err)
	}
	if got := a.Issued(); got != 1 {
		t.Fatalf("Issued() after one Leaf = %d, want 1", got)
	}
	second, err := a.Leaf("EXAMPLE.com.")
	if err != nil {
		t.Fatal(err)
	}
	if got := a.Issued(); got != 1 {
		t.Errorf("Issued() after a second Leaf for the same host = %d, want 1", got)
	}
	if first != second {
		t.Error("second Leaf returned a different certificate")
	}
}

func TestLeafSingleFlight(t *testing.T) {
	a := newCA(t)
	const n = 32
	var wg sync.WaitGroup
	certs := make([]any, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := a.Leaf("concurrent.test")
			if err != nil {
				t.Error(err)
			}
			certs[i] = c
		}()
	}
	wg.Wait()
	if got := a.Issued(); got != 1 {
		t.Errorf("Issued() after %d concurrent first calls = %d, want 1", n, got)
	}
	for i := range certs {
		if certs[i] != certs[0] {
			t.Fatalf("concurrent call %d got a different certificate", i)
		}
	}
}

func TestLeafCacheBounded(t *testing.T) {
	a := newCA(t)
	a.leaves = newLeafCache(2)
	for _, h := range []string{"a.test", "b.test", "a.test", "c.test", "a.test", "b.test"} {
		if _, err := a.Leaf(h); err != nil {
			t.Fatal(err)
		}
	}
	// a, b, (a hit), c evicts b, (a hit), b evicts c: four issued.
	if got := a.Issued(); got != 4 {
		t.Errorf("Issued() = %d, want 4 with an LRU of 2", got)
	}
	if got := a.leaves.ll.Len(); got != 2 {
		t.Errorf("cache holds %d leaves, want 2", got)
	}
}

func TestTrustBundle(t *testing.T) {
	a := newCA(t)
	other := newCA(t)
	extra := filepath.Join(t.TempDir(), "extra.pem")
	if err := os.WriteFile(extra, other.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "bad.pem")
	if err := os.WriteFile(bad, []byte("not a cert"), 0o644); err != nil {
		t.Fatal(err)
	}
	sys := filepath.Join(t.TempDir(), "system.pem")
	sysCA := newCA(t)
	if err := os.WriteFile(sys, sysCA.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SSL_CERT_FILE", sys)

	b, err := TrustBundle(a, []string{extra})
	if err != nil {
		t.Fatalf("TrustBundle = %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		t.Fatal("bundle holds no certificates")
	}
	for name, ca := range map[string]*Authority{"moat": a, "system": sysCA, "extra": other} {
		verifyLeaf(t, ca, pool, name+".test")
	}
	if !bytes.HasPrefix(b, a.CertPEM()) {
		t.Error("bundle does not start with the moat CA")
	}

	if _, err := TrustBundle(a, []string{bad}); !errors.Is(err, ErrNoCertificate) || !strings.Contains(err.Error(), bad) {
		t.Errorf("TrustBundle(bad file) = %v, want ErrNoCertificate naming %s", err, bad)
	}
	missing := filepath.Join(t.TempDir(), "missing.pem")
	if _, err := TrustBundle(a, []string{missing}); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("TrustBundle(missing file) = %v, want an error naming %s", err, missing)
	}

	// No system bundle at all is tolerated.
	t.Setenv("SSL_CERT_FILE", filepath.Join(t.TempDir(), "absent.pem"))
	b, err = TrustBundle(a, nil)
	if err != nil || !bytes.Equal(b, a.CertPEM()) {
		t.Errorf("TrustBundle without system roots = %d bytes, %v; want just the moat CA", len(b), err)
	}
}

func BenchmarkLeaf(b *testing.B) {
	a := newCA(b)
	b.Run("issue", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if _, err := a.issue("bench.test", time.Now()); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("cached", func(b *testing.B) {
		for b.Loop() {
			if _, err := a.Leaf("bench.test"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
