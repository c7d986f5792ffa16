// Package gpumap finds which GPUs an inference server runs on, from the
// process tree under /proc: the process listening on the server's port,
// its descendants (vLLM's EngineCore and TP workers, SGLang's scheduler
// ranks, TGI's shards), and the processes NVML sees on each GPU. Where
// NVML's PIDs do not resolve (a container's own PID namespace), the
// server's CUDA_VISIBLE_DEVICES is used, resolved to UUIDs.
package gpumap

import (
	"bufio"
	"bytes"
	"fmt"
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

// Resolve maps each server to the UUIDs of its GPUs, sorted by index.
// root is the proc file system ("/proc"). Servers whose process cannot
// be found are absent from the result.
func Resolve(root string, servers []Server, gpus []GPU) (map[string][]string, error) {
	procs, err := readProcs(root)
	if err != nil {
		return nil, err
	}
	listeners := listeningInodes(root)
	sockets := socketOwners(root, procs)
	out := map[string][]string{}
	for _, s := range servers {
		inode, ok := listeners[s.Port]
		if !ok {
			continue
		}
		pid, ok := sockets[inode]
		if !ok {
			continue
		}
		tree := descendants(procs, pid)
		var uuids []string
		for _, g := range gpus {
			for _, p := range g.PIDs {
				if tree[p] {
					uuids = append(uuids, g.UUID)
					break
				}
			}
		}
		if len(uuids) == 0 {
			uuids = fromEnvironment(root, tree, gpus)
		}
		if len(uuids) > 0 {
			out[s.Name] = uuids
		}
	}
	return out, nil
}

type proc struct {
	pid, ppid int
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
		b, err := os.ReadFile(filepath.Join(root, e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid …: comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		procs[pid] = proc{pid: pid, ppid: ppid}
	}
	return procs, nil
}

// listeningInodes maps listening TCP ports to their socket inodes.
func listeningInodes(root string) map[int]uint64 {
	out := map[int]uint64{}
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
			inode, err2 := strconv.ParseUint(fl[9], 10, 64)
			if err1 == nil && err2 == nil && inode != 0 {
				out[int(port)] = inode
			}
		}
		f.Close()
	}
	return out
}

// socketOwners maps socket inodes to the process holding them.
func socketOwners(root string, procs map[int]proc) map[uint64]int {
	out := map[uint64]int{}
	pids := make([]int, 0, len(procs))
	for pid := range procs {
		pids = append(pids, pid)
	}
	sort.Ints(pids) // the lowest PID, the parent, owns a shared socket
	for _, pid := range pids {
		dir := filepath.Join(root, strconv.Itoa(pid), "fd")
		fds, err := os.ReadDir(dir)
		if err != nil {
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
	return out
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
