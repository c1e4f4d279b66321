package redistest

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9/maintnotifications"
)

// Valkey, the Redis fork most Linux distributions now ship, runs with the
// same arguments as redis-server: every helper here takes its binary in
// Options.Bin, and these pick valkey-server instead of redis-server.

// ErrNoValkey is FindValkey's error when no valkey-server can be found.
var ErrNoValkey = errors.New("redistest: valkey-server not found on PATH")

// FindValkey returns the valkey-server to run: $VALKEY_SERVER, or the one
// on PATH.
func FindValkey() (string, error) {
	if bin := os.Getenv("VALKEY_SERVER"); bin != "" {
		return bin, nil
	}
	bin, err := exec.LookPath("valkey-server")
	if err != nil {
		return "", ErrNoValkey
	}
	return bin, nil
}

// ValkeyBinary is FindValkey for tests: it fails the test, saying how to get
// a valkey-server, when there is none.
func ValkeyBinary(t testing.TB) string {
	t.Helper()
	skipShort(t)
	bin, err := FindValkey()
	if err != nil {
		t.Fatal("redistest: valkey-server not found on PATH. These tests run a real Valkey. " +
			"Run `make test` (as root it installs Debian's valkey-server package, from bookworm-backports on Debian 12), " +
			"or install it yourself: `sudo apt-get install -t bookworm-backports valkey-server` / `brew install valkey`, " +
			"or point VALKEY_SERVER at a valkey-server binary.")
	}
	return bin
}

// StartValkey is Start with valkey-server.
func StartValkey(t testing.TB) *Server {
	t.Helper()
	return StartOptions(t, Options{Bin: ValkeyBinary(t)})
}

// StartValkeySentinel is StartSentinel with valkey-server: Valkey's sentinel
// is the same binary run with --sentinel, as Redis's is (Debian's
// valkey-sentinel package adds only a service for it).
func StartValkeySentinel(t testing.TB) *Sentinels {
	t.Helper()
	return startSentinel(t, ValkeyBinary(t))
}

// StartValkeyCluster is StartCluster with valkey-server.
func StartValkeyCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	return startCluster(t, ValkeyBinary(t), n, 0)
}

// ErrorStats returns the errors the server has answered since it started,
// by error prefix (INFO errorstats: "ERR", "NOSCRIPT", "WRONGTYPE", …). A
// command the server does not know, or refuses, counts here.
func (s *Server) ErrorStats(ctx context.Context) (map[string]int64, error) {
	c := s.plainClient()
	defer c.Close()
	info, err := c.Info(ctx, "errorstats").Result()
	if err != nil {
		return nil, err
	}
	stats := make(map[string]int64)
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		// errorstat_ERR:count=3
		name, n, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "errorstat_"), ":count=")
		if !ok {
			continue
		}
		stats[name], _ = strconv.ParseInt(strings.TrimSpace(n), 10, 64)
	}
	return stats, nil
}

// Version is the server's name and version as INFO server reports them:
// "valkey 8.0.1" or "redis 7.0.15".
func (s *Server) Version(ctx context.Context) (string, error) {
	c := s.plainClient()
	defer c.Close()
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return "", err
	}
	if v := infoField(info, "valkey_version"); v != "" {
		return "valkey " + v, nil
	}
	return "redis " + infoField(info, "redis_version"), nil
}

// noMaint turns off go-redis's maintenance-notifications handshake for the
// clients redistest opens, as lockstore does for the gateway's: Valkey
// refuses it, and the error would count in INFO errorstats, which the
// Valkey tests check stay clean.
func noMaint() *maintnotifications.Config {
	return &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
}
