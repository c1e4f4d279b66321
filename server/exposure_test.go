package server_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/apitest"
	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/server"
)

// running is a gateway started by runGateway.
type running struct {
	base string // http://127.0.0.1:port or https://…
	logs *apitest.SyncBuffer
}

// runGateway runs server.Run with env on a free port of addrHost (LOCKGW_ADDR
// is set here), waits until /healthz answers through hc over loopback, and
// stops it when the test ends.
func runGateway(t *testing.T, addrHost string, env map[string]string, hc *http.Client, scheme string) running {
	t.Helper()
	port := redistest.FreePort(t)
	env["LOCKGW_ADDR"] = net.JoinHostPort(addrHost, fmt.Sprint(port))
	g := running{base: fmt.Sprintf("%s://127.0.0.1:%d", scheme, port), logs: &apitest.SyncBuffer{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- server.Run(ctx, nil, func(k string) string { return env[k] }, g.logs, g.logs) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if resp, err := hc.Get(g.base + "/healthz"); err == nil {
			resp.Body.Close()
			return g
		}
		select {
		case err := <-done:
			t.Fatalf("gateway exited: %v\n%s", err, g.logs)
		default:
		}
		require.True(t, time.Now().Before(deadline), "no /healthz in 10s: %s", g.logs)
	}
}

// waitLog waits until a log line with msg is written (JSON logs are
// buffered for a moment) and returns the lines with it.
func (g running) waitLog(t *testing.T, msg string) []map[string]any {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if lines := g.logLines(t, msg); len(lines) > 0 {
			return lines
		}
		require.True(t, time.Now().Before(deadline), "no log line %q in 5s: %s", msg, g.logs)
	}
}

// logLines returns the gateway's JSON log lines with the given message.
func (g running) logLines(t *testing.T, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(g.logs.String()) {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && (msg == "" || m["message"] == msg) {
			out = append(out, m)
		}
	}
	return out
}

func TestListensOnLoopbackByDefault(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	logs := &apitest.SyncBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- server.Run(ctx, nil, func(k string) string { return map[string]string{"LOCKGW_LOG_LEVEL": "info"}[k] }, logs, logs)
	}()
	defer func() { cancel(); <-done }()
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(logs.String(), "lockgateway listening"); time.Sleep(10 * time.Millisecond) {
		select {
		case err := <-done:
			t.Skipf("the default address 127.0.0.1:8080 is taken here: %v", err)
		default:
		}
		require.True(t, time.Now().Before(deadline))
	}
	assert.Contains(t, logs.String(), `"addr":"127.0.0.1:8080"`)
	assert.Contains(t, logs.String(), `"reachable_from":"this machine only (loopback)"`)
	assert.NotContains(t, logs.String(), `"level":"warn"`)
}

// TestNonLoopbackNeedsKeysOrConsent: every interface without API keys is
// refused at start-up with a message saying why and what to set.
func TestNonLoopbackNeedsKeysOrConsent(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0"} {
		err := server.Run(context.Background(), nil, func(k string) string { return map[string]string{"LOCKGW_ADDR": addr}[k] }, os.Stderr, os.Stderr)
		require.Error(t, err, addr)
		for _, want := range []string{"LOCKGW_ADDR", "anyone who reaches it could take and release every lock", "LOCKGW_API_KEYS_FILE", "LOCKGW_ALLOW_UNAUTHENTICATED=true", "127.0.0.1:8080"} {
			assert.Contains(t, err.Error(), want, addr)
		}
	}
	err := server.Run(context.Background(), []string{"--addr", "0.0.0.0:0"}, func(string) string { return "" }, os.Stderr, os.Stderr)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `--addr: "0.0.0.0:0" accepts connections from other machines`)
}

// TestExposureLogged: allowed on every interface without keys, with the
// memory backend: the start-up says what is exposed and warns twice; the
// dashboard's 404 says why it is off.
func TestExposureLogged(t *testing.T) {
	g := runGateway(t, "0.0.0.0", map[string]string{"LOCKGW_ALLOW_UNAUTHENTICATED": "true"}, http.DefaultClient, "http")
	listening := g.waitLog(t, "lockgateway listening")
	require.Len(t, listening, 1, g.logs)
	g.waitLog(t, "the memory backend keeps locks in this process only: a second gateway (another replica) would grant the same key again; set LOCKGW_BACKEND=redis (or redlock) when more than one gateway serves these locks")
	assert.Equal(t, "other machines too", listening[0]["reachable_from"])
	assert.Equal(t, "none", listening[0]["auth"])
	assert.Equal(t, false, listening[0]["tls"])
	assert.Equal(t, false, listening[0]["ui"])
	var warnings []string
	for _, l := range g.logLines(t, "") {
		if l["level"] == "warn" {
			warnings = append(warnings, l["message"].(string))
		}
	}
	require.Len(t, warnings, 2, "%q", warnings)
	assert.Contains(t, warnings[0], "without API keys")
	assert.Contains(t, warnings[1], "a second gateway (another replica) would grant the same key again")

	for _, path := range []string{"/ui/", "/ui"} {
		resp, err := http.Get(g.base + path)
		require.NoError(t, err)
		var p map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&p))
		resp.Body.Close()
		assert.Equal(t, http.StatusNotFound, resp.StatusCode)
		assert.Contains(t, p["detail"], "the dashboard is off on this address: LOCKGW_UI is auto", path)
	}
}

func TestUIOffSaysWhy(t *testing.T) {
	g := apitest.Start(t, map[string]string{"LOCKGW_UI": "false"})
	r := apitest.NewClient(g.URL).Do(t, "GET", "/ui/", nil)
	assert.Equal(t, http.StatusNotFound, r.Status)
	assert.Contains(t, r.Problem(t)["detail"], "LOCKGW_UI is false")
}

// selfSigned writes a new self-signed certificate for 127.0.0.1 and its key
// to dir/name.crt and dir/name.key (by rename, as a rotation would) and
// returns the certificate.
func selfSigned(t *testing.T, dir, name string, serial int64) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: "lockgateway test"},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:         true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	write := func(file, typ string, b []byte) {
		tmp := filepath.Join(dir, "."+file)
		require.NoError(t, os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600))
		require.NoError(t, os.Rename(tmp, filepath.Join(dir, file)))
	}
	write(name+".key", "EC PRIVATE KEY", keyDER)
	write(name+".crt", "CERTIFICATE", der)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return cert
}

// TestTLS serves HTTPS from a self-signed pair, then rotates it on disk:
// new connections get the new certificate without a restart. A half-done
// rotation (a certificate whose key is not there yet) keeps the previous
// pair in service.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	first := selfSigned(t, dir, "tls", 1)
	pool := x509.NewCertPool()
	pool.AddCert(first)
	var served *x509.Certificate
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true, // a handshake per request
		TLSClientConfig: &tls.Config{RootCAs: pool, VerifyConnection: func(cs tls.ConnectionState) error {
			served = cs.PeerCertificates[0]
			return nil
		}},
	}}
	env := map[string]string{"LOCKGW_TLS_CERT": filepath.Join(dir, "tls.crt"), "LOCKGW_TLS_KEY": filepath.Join(dir, "tls.key")}
	g := runGateway(t, "127.0.0.1", env, hc, "https")
	listening := g.waitLog(t, "lockgateway listening")
	require.Len(t, listening, 1)
	assert.Equal(t, true, listening[0]["tls"])
	assert.True(t, strings.HasPrefix(listening[0]["url"].(string), "https://"))

	// A lock over HTTPS.
	req, _ := http.NewRequest("PUT", g.base+"/locks/tls/one", nil)
	resp, err := hc.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusCreated, resp.StatusCode)
	assert.Equal(t, first.SerialNumber, served.SerialNumber)

	// Rotation: the new certificate is trusted too, and served within a
	// few seconds (the files are looked at at most once a second).
	second := selfSigned(t, dir, "tls", 2)
	pool.AddCert(second)
	waitServed := func(want *x509.Certificate) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			resp, err := hc.Get(g.base + "/healthz")
			require.NoError(t, err)
			resp.Body.Close()
			if served.SerialNumber.Cmp(want.SerialNumber) == 0 {
				return
			}
			require.True(t, time.Now().Before(deadline), "still serving serial %v, want %v", served.SerialNumber, want.SerialNumber)
		}
	}
	waitServed(second)
	assert.Len(t, g.waitLog(t, "tls: certificate reloaded"), 1)

	// Half a rotation: a new certificate, its key still the old one.
	third := selfSigned(t, t.TempDir(), "other", 3)
	raw := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: third.Raw})
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tls.crt"), raw, 0o600))
	for deadline := time.Now().Add(5 * time.Second); len(g.logLines(t, "tls: the certificate files changed but do not load as a pair; serving the certificate read before until they do")) == 0; time.Sleep(100 * time.Millisecond) {
		resp, err := hc.Get(g.base + "/healthz")
		require.NoError(t, err, "the previous pair stays in service")
		resp.Body.Close()
		require.True(t, time.Now().Before(deadline), "no warning of the mismatched pair: %s", g.logs)
	}
	resp, err = hc.Get(g.base + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, second.SerialNumber, served.SerialNumber)
}

func TestTLSNeedsBothFiles(t *testing.T) {
	dir := t.TempDir()
	selfSigned(t, dir, "tls", 1)
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"LOCKGW_TLS_CERT": filepath.Join(dir, "tls.crt")}, "HTTPS needs both a certificate and its key"},
		{map[string]string{"LOCKGW_TLS_CERT": filepath.Join(dir, "tls.crt"), "LOCKGW_TLS_KEY": filepath.Join(dir, "missing.key")}, "missing.key"},
		{map[string]string{"LOCKGW_TLS_CERT": filepath.Join(dir, "tls.key"), "LOCKGW_TLS_KEY": filepath.Join(dir, "tls.key")}, "--tls-cert"},
	} {
		tc.env["LOCKGW_ADDR"] = "127.0.0.1:0"
		err := server.Run(context.Background(), nil, func(k string) string { return tc.env[k] }, os.Stderr, os.Stderr)
		require.Error(t, err)
		assert.Contains(t, err.Error(), tc.want)
	}
}

func TestDefaultAddrIsLoopback(t *testing.T) {
	var out strings.Builder
	require.NoError(t, server.Run(context.Background(), []string{"--help"}, func(string) string { return "" }, &out, &out))
	assert.Contains(t, out.String(), "--addr value, LOCKGW_ADDR (default 127.0.0.1:8080)")
}
