package preflight

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// What tpsmon.service runs as; `tpsmon check` run as root probes as the
// same user and groups, with the token passed the way LoadCredential=
// passes it, so it says what the service will meet.
const (
	ServiceUser = "tpsmon"
	// stateDir is the unit's StateDirectory=: the only place it may write
	// (ProtectSystem=strict); systemd creates it at start.
	stateDir = "/var/lib/tpsmon"
	// credentialSource is the unit's LoadCredential=influx-token:… file.
	credentialSource = "/etc/tpsmon/credentials/influx-token"
	// asServiceEnv marks the check that root started as the service user.
	asServiceEnv = "TPSMON_CHECK_AS_SERVICE"
)

// serviceGroups are the unit's SupplementaryGroups=.
var serviceGroups = []string{"systemd-journal", "adm"}

// AsService reports whether this check runs as the service user for root.
func AsService() bool { return os.Getenv(asServiceEnv) != "" }

// AsServiceUser re-runs `tpsmon` with args as the service user when root
// runs it and that user exists. ran is false when it did not (not root,
// no such user): then the caller checks as itself.
func AsServiceUser(w io.Writer, args []string) (ran bool, err error) {
	if os.Geteuid() != 0 || AsService() {
		return false, nil
	}
	u, err := user.Lookup(ServiceUser)
	if err != nil {
		fmt.Fprintf(w, "note  running as root and there is no %s user: the probes see what root sees, not the service\n", ServiceUser)
		return false, nil
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	groups := []uint32{uint32(gid)}
	names := []string{ServiceUser}
	for _, g := range serviceGroups {
		if grp, err := user.LookupGroup(g); err == nil {
			id, _ := strconv.Atoi(grp.Gid)
			groups = append(groups, uint32(id))
			names = append(names, g)
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return true, fmt.Errorf("check: %w", err)
	}
	env := append(os.Environ(), asServiceEnv+"=1")
	// The token as the unit gets it: PID 1 reads the root-only file and
	// hands the service a copy in $CREDENTIALS_DIRECTORY.
	if os.Getenv("CREDENTIALS_DIRECTORY") == "" {
		dir, cleanup, err := credentialCopy(uid, gid)
		if err != nil {
			return true, err
		}
		defer cleanup()
		if dir != "" {
			env = append(env, "CREDENTIALS_DIRECTORY="+dir)
		}
	}
	fmt.Fprintf(w, "note  running as root: probing as the service does, as user %s (groups %s)\n", ServiceUser, strings.Join(names, ", "))
	cmd := exec.Command(exe, args...)
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, w, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: groups}}
	// Somewhere the service user may stand: root's working directory may
	// be closed to it.
	cmd.Dir = "/"
	err = cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		// It said "check failed" itself: only its exit status is passed on.
		return true, Reported{Code: exit.ExitCode()}
	}
	if err != nil {
		return true, fmt.Errorf("check as %s: %w", ServiceUser, err)
	}
	return true, nil
}

// Reported is a failure a child process already told the user; main
// exits with its status without a word of its own.
type Reported struct{ Code int }

func (r Reported) Error() string { return fmt.Sprintf("exit status %d", r.Code) }

// credentialCopy copies the unit's credential source into a private
// directory owned by the service user; "" when there is no such file.
func credentialCopy(uid, gid int) (string, func(), error) {
	b, err := os.ReadFile(credentialSource)
	if errors.Is(err, os.ErrNotExist) {
		return "", func() {}, nil
	}
	if err != nil {
		return "", nil, fmt.Errorf("check: %w", err)
	}
	dir, err := os.MkdirTemp("", "tpsmon-check-credentials-")
	if err != nil {
		return "", nil, fmt.Errorf("check: %w", err)
	}
	cleanup := func() { os.RemoveAll(dir) }
	f := filepath.Join(dir, "influx-token")
	if err := os.WriteFile(f, b, 0o400); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("check: %w", err)
	}
	if err := errors.Join(os.Chown(dir, uid, gid), os.Chown(f, uid, gid), os.Chmod(dir, 0o500)); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("check: %w", err)
	}
	return dir, cleanup, nil
}

// journalReadable runs journalctl for unit as this user, as the daemon
// will, and returns journalctl's own complaint when it cannot read it.
func journalReadable(unit string) error {
	cmd := exec.Command("journalctl", "-u", unit, "-n", "1", "-o", "json", "--no-pager")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	msg := strings.TrimSpace(stderr.String())
	if err == nil && strings.Contains(msg, "not seeing messages from other users and the system") {
		err = errors.New("exit status 0")
	}
	if err != nil {
		first, _, _ := strings.Cut(msg, "\n")
		return fmt.Errorf("journal of %s unreadable: journalctl: %s (%v); the reading user needs the systemd-journal or adm group", unit, first, err)
	}
	return nil
}

// underStateDir reports whether path is inside the unit's StateDirectory.
func underStateDir(path string) bool {
	rel, err := filepath.Rel(stateDir, filepath.Clean(path))
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}
