package modelfacts

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/tpsmon/tpsmon/collector"
	"github.com/tpsmon/tpsmon/internal/statefile"
)

// ErrLoggedModel marks a model the server logged that is not read here:
// the reason is said, and no fact is taken from it.
var ErrLoggedModel = errors.New("the model the server logged")

// repoIDRE is a Hugging Face repo id: a name, or an owner and a name.
var repoIDRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,95}(/[A-Za-z0-9][A-Za-z0-9._-]{0,95})?$`)

// revRE is a revision a hub cache has a ref file for (a branch or tag),
// commitRE one that names its snapshot.
var (
	revRE    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$`)
	commitRE = regexp.MustCompile(`^[0-9a-f]{40}$`)
)

// hfEnv reads the environment for the hub cache conventions; tests
// replace it.
var hfEnv = os.Getenv

// HubDirs are the Hugging Face hub caches a repo id is looked for in, in
// order: the configured ones (servers[].roofline.hf_hub_dirs), the
// download directory the server logged with it, then the conventions of
// tpsmon's own environment (HF_HUB_CACHE, HF_HOME/hub,
// XDG_CACHE_HOME/huggingface/hub, ~/.cache/huggingface/hub): a service's
// unit sets them to the server's.
func HubDirs(configured []string, e collector.EngineFacts) []string {
	dirs := append([]string(nil), configured...)
	if d := e.LoggedDownloadDir; d != "" && filepath.IsAbs(d) && !hasDotDot(d) {
		dirs = append(dirs, d)
	}
	switch {
	case hfEnv("HF_HUB_CACHE") != "":
		dirs = append(dirs, hfEnv("HF_HUB_CACHE"))
	case hfEnv("HF_HOME") != "":
		dirs = append(dirs, filepath.Join(hfEnv("HF_HOME"), "hub"))
	case hfEnv("XDG_CACHE_HOME") != "":
		dirs = append(dirs, filepath.Join(hfEnv("XDG_CACHE_HOME"), "huggingface", "hub"))
	case hfEnv("HOME") != "":
		dirs = append(dirs, filepath.Join(hfEnv("HOME"), ".cache", "huggingface", "hub"))
	}
	seen := map[string]bool{}
	out := dirs[:0]
	for _, d := range dirs {
		if d = filepath.Clean(d); !seen[d] && filepath.IsAbs(d) {
			seen[d] = true
			out = append(out, d)
		}
	}
	return out
}

// LoggedModel finds here the model a server logged (e.LoggedModel): an
// absolute path (a model directory or file, or a hub cache's repo
// directory), or a Hugging Face repo id looked for in hubDirs. It returns
// the path to read and how it was found; an error (ErrLoggedModel) says
// why nothing is read: a path with "..", one relative to the server's
// working directory, an escaped value, one absent or unreadable here, a
// repo in no cache.
func LoggedModel(e collector.EngineFacts, hubDirs []string) (path, how string, err error) {
	v := e.LoggedModel
	said := strings.TrimSpace(fmt.Sprintf("%s model %q", e.LoggedModelFrom, v))
	fail := func(format string, a ...any) (string, string, error) {
		return "", "", fmt.Errorf("%w (%s %q): %s", ErrLoggedModel, e.LoggedModelFrom, v, fmt.Sprintf(format, a...))
	}
	switch {
	case v == "":
		return fail("none")
	case strings.ContainsAny(v, "\\\x00") || strings.ContainsFunc(v, func(r rune) bool { return r < ' ' || r == 0x7f }):
		return fail("an escaped or control character: not read")
	case hasDotDot(v):
		return fail(`a ".." element: not followed`)
	case filepath.IsAbs(v):
		p := filepath.Clean(v)
		st, err := os.Stat(p)
		if err != nil {
			return fail("%v", statErr(err))
		}
		if st.IsDir() && isHubRepo(p) {
			snap, ref, err := snapshot(p, e.LoggedRevision)
			if err != nil {
				return fail("%v", err)
			}
			return snap, fmt.Sprintf("%s at %s (%s)", said, snap, ref), nil
		}
		return p, said, nil
	case strings.HasPrefix(v, "~") || strings.HasPrefix(v, "./") || !repoIDRE.MatchString(v):
		return fail("relative to the server's working directory or home, which tpsmon does not know: set servers[].model_file")
	}
	if e.LoggedRevision != "" && (!revRE.MatchString(e.LoggedRevision) || hasDotDot(e.LoggedRevision)) {
		return fail("revision %q is not one a hub cache names", e.LoggedRevision)
	}
	name := "models--" + strings.ReplaceAll(v, "/", "--")
	var unread, notRead []string
	for _, hub := range hubDirs {
		repo := filepath.Join(hub, name)
		if _, err := os.Stat(repo); err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				unread = append(unread, statErr(err).Error())
			}
			continue
		}
		snap, ref, err := snapshot(repo, e.LoggedRevision)
		if err != nil {
			notRead = append(notRead, err.Error())
			continue
		}
		return snap, fmt.Sprintf("%s at %s (%s)", said, snap, ref), nil
	}
	if len(notRead) > 0 {
		return fail("in the hub cache, but %s", strings.Join(notRead, "; "))
	}
	const set = "set servers[].model_file, or servers[].roofline.hf_hub_dirs or HF_HUB_CACHE in tpsmon's environment to the server's hub cache"
	msg := fmt.Sprintf("a Hugging Face repo id in no hub cache searched (%s), or a path relative to the server's working directory, which tpsmon does not know: %s", strings.Join(hubDirs, ", "), set)
	if len(hubDirs) == 0 {
		msg = "a Hugging Face repo id, and no hub cache to look in: " + set
	}
	if len(unread) > 0 {
		msg += "; " + strings.Join(unread, "; ")
	}
	return fail("%s", msg)
}

// hasDotDot says whether a path has a ".." element.
func hasDotDot(p string) bool {
	for _, el := range strings.Split(p, "/") {
		if el == ".." {
			return true
		}
	}
	return false
}

// statErr says why a path cannot be looked at, in words.
func statErr(err error) error {
	var pe *fs.PathError
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if errors.As(err, &pe) {
			return fmt.Errorf("%s is not here (another machine or container?)", pe.Path)
		}
	case errors.Is(err, fs.ErrPermission):
		if errors.As(err, &pe) {
			return fmt.Errorf("%s: tpsmon's user may not read it (%v)", pe.Path, pe.Err)
		}
	}
	return err
}

// isHubRepo says whether dir is a hub cache's repo directory (snapshots/
// and refs/, no config.json of its own), as a path vLLM logs when it was
// given one.
func isHubRepo(dir string) bool {
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err == nil {
		return false
	}
	st, err := os.Stat(filepath.Join(dir, "snapshots"))
	return err == nil && st.IsDir()
}

// maxRef bounds a ref file: a commit hash and a newline.
const maxRef = 256

// snapshot returns the snapshot of repo (a hub cache's models--owner--name)
// that rev names (a commit, or a branch or tag under refs/; "" is main),
// and how: the ref read, or the only snapshot where the ref is missing.
// Several snapshots and no ref is an error: which one the server loaded
// is not known.
func snapshot(repo, rev string) (dir, how string, err error) {
	if rev == "" {
		rev = "main"
	}
	commit := rev
	how = "revision " + rev
	if !commitRE.MatchString(rev) {
		ref := filepath.Join(repo, "refs", filepath.FromSlash(rev))
		b, err := readRef(ref)
		switch {
		case err == nil:
			commit = strings.TrimSpace(string(b))
			if !commitRE.MatchString(commit) {
				return "", "", fmt.Errorf("%s holds %q, not a commit hash", ref, truncate(commit, 64))
			}
			how = fmt.Sprintf("refs/%s %s", rev, commit)
		case errors.Is(err, fs.ErrNotExist):
			snaps, lerr := os.ReadDir(filepath.Join(repo, "snapshots"))
			if lerr != nil {
				return "", "", statErr(lerr)
			}
			if len(snaps) != 1 {
				return "", "", fmt.Errorf("%s has no refs/%s and %d snapshots: which one the server loaded is not known (set servers[].model_file)", repo, rev, len(snaps))
			}
			commit, how = snaps[0].Name(), fmt.Sprintf("its only snapshot %s, no refs/%s", snaps[0].Name(), rev)
		default:
			return "", "", err
		}
	}
	dir = filepath.Join(repo, "snapshots", commit)
	st, err := os.Stat(dir)
	if err != nil {
		return "", "", statErr(err)
	}
	if !st.IsDir() {
		return "", "", fmt.Errorf("%s is not a directory", dir)
	}
	return dir, how, nil
}

// readRef reads a hub cache's ref file, a regular file of a few bytes.
func readRef(path string) ([]byte, error) {
	f, st, err := statefile.OpenRegular(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		return nil, fmt.Errorf("%s: %w", path, statErr(err))
	}
	defer f.Close()
	if st.Size() > maxRef {
		return nil, fmt.Errorf("%s: %d bytes, not a ref", path, st.Size())
	}
	return io.ReadAll(io.LimitReader(f, maxRef))
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
