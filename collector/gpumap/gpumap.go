// Package gpumap finds which GPUs an inference server runs on, from the
// process tree under /proc: the process listening on the server's port,
// its descendants (vLLM's EngineCore and TP workers, SGLang's scheduler
// ranks, TGI's shards), and the processes NVML sees on each GPU. Where
// NVML's PIDs do not resolve (a container's own PID namespace), the
// server's CUDA_VISIBLE_DEVICES is used, resolved to UUIDs.
//
// The process holding a listening socket is known exactly only from
// /proc/PID/fd, which the kernel shows to the process's own user and to
// root. For another user's server (tpsmon runs as its own user, without
// capabilities) the world-readable parts decide, and only when they leave
// one answer: the socket's owner uid in /proc/net/tcp, each process's uid
// and parent in /proc/PID/status, and its command line. Anything else is
// left unplaced, with the reason.
package gpumap

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// GPU is one GPU as NVML enumerates it.
type GPU struct {
	Index int
	UUID  string
	PIDs  []int // compute processes NVML sees on it
}

// Server is an inference server found by the port it listens on.
type Server struct {
	Name string
	Port int
}

// How a server's process was found, most certain first.
const (
	// BySocket: the process holding the listening socket (/proc/PID/fd).
	BySocket = "socket"
	// ByCmdline: the only process of the socket's owner whose command
	// line names the port (--port N), with its descendants.
	ByCmdline = "cmdline"
	// ByOwner: the socket's owner (not root) listens for no other
	// configured server, and all its GPU processes are in one process
	// tree of that user.
	ByOwner = "owner"
)

// Placement is where a server was found.
type Placement struct {
	GPUs []string // UUIDs, sorted by index; empty: none of its processes is on a GPU
	By   string   // BySocket, ByCmdline or ByOwner
	PID  int      // the top of the server's process tree
}

// Result is what Resolve found.
type Result struct {
	// Placed holds the servers whose process was found.
	Placed map[string]Placement
	// Unplaced says, per server whose port is listened on but whose
	// process could not be told for certain, why: tpsmon guesses nothing.
	Unplaced map[string]string
}

// Resolve maps each server to its process tree and the UUIDs of its GPUs.
// root is the proc file system ("/proc"). Servers whose port nobody
// listens on are in neither map.
func Resolve(root string, servers []Server, gpus []GPU) (Result, error) {
	procs, err := readProcs(root)
	if err != nil {
		return Result{}, err
	}
	r := &resolver{root: root, procs: procs, gpus: gpus, listeners: listeningSockets(root)}
	r.sockets, r.fdErr = socketOwners(root, procs)
	res := Result{Placed: map[string]Placement{}, Unplaced: map[string]string{}}
	for _, s := range servers {
		pid, by, why := r.find(s, servers)
		switch {
		case why != "":
			res.Unplaced[s.Name] = why
		case pid != 0:
			res.Placed[s.Name] = Placement{GPUs: r.gpusOf(pid), By: by, PID: pid}
		}
	}
	return res, nil
}

type proc struct {
	pid, ppid int
	uid       int // the file-system uid, the one a socket is owned by; -1: unknown
}

type listener struct {
	inode uint64
	uid   int
}

type resolver struct {
	root      string
	procs     map[int]proc
	gpus      []GPU
	listeners map[int][]listener // by port
	sockets   map[uint64]int     // socket inode -> holding PID
	fdErr     map[int]error      // uid -> why its processes' fds could not be read
}

// find returns the top of s's process tree and how it was found; why
// says what kept it from being found for certain; all zero when nothing
// listens on s's port.
func (r *resolver) find(s Server, servers []Server) (pid int, by, why string) {
	ls := r.listeners[s.Port]
	if len(ls) == 0 {
		return 0, "", ""
	}
	for _, l := range ls {
		if pid, ok := r.sockets[l.inode]; ok {
			return pid, BySocket, ""
		}
	}
	uid := ls[0].uid
	for _, l := range ls[1:] {
		if l.uid != uid {
			return 0, "", fmt.Sprintf("port %d is listened on by uids %d and %d, and no process holding it is readable", s.Port, uid, l.uid)
		}
	}
	// Why the exact way failed: said with every answer below.
	var cause string
	switch err := r.fdErr[uid]; {
	case errors.Is(err, fs.ErrPermission):
		cause = fmt.Sprintf("port %d is listened on by uid %d, whose /proc/PID/fd tpsmon may not read (permission denied)", s.Port, uid)
	case err != nil:
		cause = fmt.Sprintf("port %d is listened on by uid %d, whose /proc/PID/fd tpsmon cannot read (%v)", s.Port, uid, err)
	default:
		cause = fmt.Sprintf("port %d is listened on by uid %d, and no visible process holds the socket", s.Port, uid)
	}
	if !r.anyOf(uid) {
		return 0, "", cause + fmt.Sprintf("; no process of uid %d is visible in %s (hidepid= or ProtectProc=?)", uid, r.root)
	}
	tops := r.naming(uid, s.Port)
	switch len(tops) {
	case 1:
		return tops[0], ByCmdline, ""
	case 0:
	default:
		return 0, "", cause + fmt.Sprintf("; processes %s of uid %d all name --port %d", pidList(tops), uid, s.Port)
	}
	if uid == 0 {
		return 0, "", cause + "; no process of it names the port, and root's processes are not told apart by their owner"
	}
	var same []string
	for _, o := range servers {
		if o.Name != s.Name && r.listenedBy(o.Port, uid) {
			same = append(same, o.Name)
		}
	}
	if len(same) > 0 {
		return 0, "", cause + fmt.Sprintf("; no process of it names the port, and it listens for other configured servers too (%s)",
			strings.Join(same, ", "))
	}
	tops = r.gpuTrees(uid)
	switch len(tops) {
	case 0:
		return 0, "", "" // none of its processes is on a GPU: nothing to place
	case 1:
		return tops[0], ByOwner, ""
	default:
		return 0, "", cause + fmt.Sprintf("; no process of it names the port, and its GPU processes are in %d separate process trees (%s)",
			len(tops), pidList(tops))
	}
}

// gpusOf returns the UUIDs of the GPUs that the tree below pid uses.
func (r *resolver) gpusOf(pid int) []string {
	tree := descendants(r.procs, pid)
	var uuids []string
	for _, g := range r.gpus {
		for _, p := range g.PIDs {
			if tree[p] {
				uuids = append(uuids, g.UUID)
				break
			}
		}
	}
	if len(uuids) == 0 {
		uuids = fromEnvironment(r.root, tree, r.gpus)
	}
	return uuids
}

func (r *resolver) anyOf(uid int) bool {
	for _, p := range r.procs {
		if p.uid == uid {
			return true
		}
	}
	return false
}

func (r *resolver) listenedBy(port, uid int) bool {
	for _, l := range r.listeners[port] {
		if l.uid == uid {
			return true
		}
	}
	return false
}

// naming returns the topmost processes of uid whose command line names
// port: a forked worker repeats its parent's command line.
func (r *resolver) naming(uid, port int) []int {
	named := map[int]bool{}
	for pid, p := range r.procs {
		if p.uid == uid && namesPort(readCmdline(filepath.Join(r.root, strconv.Itoa(pid), "cmdline")), port) {
			named[pid] = true
		}
	}
	var tops []int
	for pid := range named {
		if !r.hasAncestor(pid, named) {
			tops = append(tops, pid)
		}
	}
	sort.Ints(tops)
	return tops
}

// gpuTrees returns the distinct tops of uid's trees (walking up while
// the parent is uid's too) that hold a process NVML sees on a GPU.
func (r *resolver) gpuTrees(uid int) []int {
	set := map[int]bool{}
	for _, g := range r.gpus {
		for _, pid := range g.PIDs {
			p, ok := r.procs[pid]
			if !ok || p.uid != uid {
				continue
			}
			for seen := 0; seen < len(r.procs); seen++ {
				parent, ok := r.procs[p.ppid]
				if !ok || parent.uid != uid || parent.pid == p.pid {
					break
				}
				p = parent
			}
			set[p.pid] = true
		}
	}
	tops := make([]int, 0, len(set))
	for pid := range set {
		tops = append(tops, pid)
	}
	sort.Ints(tops)
	return tops
}

func (r *resolver) hasAncestor(pid int, in map[int]bool) bool {
	p := r.procs[pid]
	for seen := 0; seen < len(r.procs); seen++ {
		parent, ok := r.procs[p.ppid]
		if !ok || parent.pid == p.pid {
			return false
		}
		if in[parent.pid] {
			return true
		}
		p = parent
	}
	return false
}

func pidList(pids []int) string {
	s := make([]string, len(pids))
	for i, p := range pids {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ", ")
}

func readCmdline(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}

// namesPort reports whether args hold "--port N" or "--port=N", the
// spelling vLLM, SGLang, TGI and llama-server share.
func namesPort(args []string, port int) bool {
	p := strconv.Itoa(port)
	for i, a := range args {
		if a == "--port="+p || (a == "--port" && i+1 < len(args) && args[i+1] == p) {
			return true
		}
	}
	return false
}

func readProcs(root string) (map[int]proc, error) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("gpumap: %w", err)
	}
	procs := map[int]proc{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		// status is readable by everyone unless /proc hides the process.
		b, err := os.ReadFile(filepath.Join(root, e.Name(), "status"))
		if err != nil {
			continue
		}
		p := proc{pid: pid, ppid: -1, uid: -1}
		for _, line := range strings.Split(string(b), "\n") {
			k, v, _ := strings.Cut(line, ":")
			f := strings.Fields(v)
			switch {
			case k == "PPid" && len(f) == 1:
				p.ppid, _ = strconv.Atoi(f[0])
			case k == "Uid" && len(f) == 4: // real, effective, saved, file system
				p.uid, _ = strconv.Atoi(f[3])
			}
		}
		if p.ppid >= 0 {
			procs[pid] = p
		}
	}
	return procs, nil
}

// listeningSockets lists the listening TCP sockets by port, with their
// inodes and owners.
func listeningSockets(root string) map[int][]listener {
	out := map[int][]listener{}
	for _, name := range []string{"net/tcp", "net/tcp6"} {
		f, err := os.Open(filepath.Join(root, name))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // header
		for sc.Scan() {
			fl := strings.Fields(sc.Text())
			if len(fl) < 10 || fl[3] != "0A" { // 0A: LISTEN
				continue
			}
			_, portHex, ok := strings.Cut(fl[1], ":")
			if !ok {
				continue
			}
			port, err1 := strconv.ParseUint(portHex, 16, 16)
			uid, err2 := strconv.Atoi(fl[7])
			inode, err3 := strconv.ParseUint(fl[9], 10, 64)
			if err1 == nil && err2 == nil && err3 == nil && inode != 0 {
				out[int(port)] = append(out[int(port)], listener{inode: inode, uid: uid})
			}
		}
		f.Close()
	}
	return out
}

// socketOwners maps socket inodes to the process holding them, and says
// per uid why its processes' descriptors could not be read.
func socketOwners(root string, procs map[int]proc) (map[uint64]int, map[int]error) {
	out := map[uint64]int{}
	fdErr := map[int]error{}
	pids := make([]int, 0, len(procs))
	for pid := range procs {
		pids = append(pids, pid)
	}
	sort.Ints(pids) // the lowest PID, the parent, owns a shared socket
	for _, pid := range pids {
		dir := filepath.Join(root, strconv.Itoa(pid), "fd")
		fds, err := os.ReadDir(dir)
		if err != nil {
			if uid := procs[pid].uid; fdErr[uid] == nil || errors.Is(err, fs.ErrPermission) {
				fdErr[uid] = err
			}
			continue
		}
		for _, fd := range fds {
			target, err := os.Readlink(filepath.Join(dir, fd.Name()))
			if err != nil || !strings.HasPrefix(target, "socket:[") {
				continue
			}
			inode, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(target, "socket:["), "]"), 10, 64)
			if err == nil {
				if _, ok := out[inode]; !ok {
					out[inode] = pid
				}
			}
		}
	}
	return out, fdErr
}

// descendants returns pid and every process below it.
func descendants(procs map[int]proc, pid int) map[int]bool {
	children := map[int][]int{}
	for _, p := range procs {
		children[p.ppid] = append(children[p.ppid], p.pid)
	}
	tree := map[int]bool{pid: true}
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			if !tree[c] {
				tree[c] = true
				queue = append(queue, c)
			}
		}
	}
	return tree
}

// fromEnvironment resolves the CUDA_VISIBLE_DEVICES of the server's
// processes to UUIDs. Inside a container, NVIDIA_VISIBLE_DEVICES chooses
// the host GPUs and CUDA_VISIBLE_DEVICES counts among those. Indices are
// taken in PCI order (NVML's), which CUDA follows with
// CUDA_DEVICE_ORDER=PCI_BUS_ID.
func fromEnvironment(root string, tree map[int]bool, gpus []GPU) []string {
	pids := make([]int, 0, len(tree))
	for p := range tree {
		pids = append(pids, p)
	}
	sort.Ints(pids)
	for _, pid := range pids {
		env := readEnviron(filepath.Join(root, strconv.Itoa(pid), "environ"))
		cvd, hasCVD := env["CUDA_VISIBLE_DEVICES"]
		nvd := env["NVIDIA_VISIBLE_DEVICES"]
		if !hasCVD && (nvd == "" || nvd == "all" || nvd == "void" || nvd == "none") {
			continue
		}
		visible := gpus
		if nvd != "" && nvd != "all" {
			visible = pick(gpus, nvd, gpus)
		}
		if hasCVD {
			visible = pick(visible, cvd, gpus)
		}
		var uuids []string
		for _, g := range visible {
			uuids = append(uuids, g.UUID)
		}
		if len(uuids) > 0 {
			return uuids
		}
	}
	return nil
}

// pick selects from visible by a comma list of indices into it, or of
// UUIDs of any GPU.
func pick(visible []GPU, list string, all []GPU) []GPU {
	var out []GPU
	for _, item := range strings.Split(list, ",") {
		item = strings.TrimSpace(item)
		if i, err := strconv.Atoi(item); err == nil {
			if i >= 0 && i < len(visible) {
				out = append(out, visible[i])
			}
			continue
		}
		for _, g := range all {
			if g.UUID == item || strings.HasPrefix(g.UUID, item) {
				out = append(out, g)
			}
		}
	}
	return out
}

func readEnviron(path string) map[string]string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	env := map[string]string{}
	for _, kv := range bytes.Split(b, []byte{0}) {
		if k, v, ok := strings.Cut(string(kv), "="); ok {
			env[k] = v
		}
	}
	return env
}
