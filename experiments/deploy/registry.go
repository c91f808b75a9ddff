package deploy

import (
	"fmt"
	"slices"
	"strings"
	"sync"
)

// registry maps names to the constructors of one extension point's implementations (routers, autoscale metrics).
// Registration usually happens in init functions and lookups in concurrent runs, hence the lock.
type registry[T any] struct {
	kind string // what an entry is, in messages: "router"

	mu  sync.RWMutex
	new map[string]func() T
}

func (r *registry[T]) register(name string, newT func() T) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case name == "":
		panic(fmt.Sprintf("deploy: a %s registered without a name", r.kind))
	case newT == nil:
		panic(fmt.Sprintf("deploy: %s %q registered with a nil constructor", r.kind, name))
	case r.new[name] != nil:
		panic(fmt.Sprintf("deploy: %s %q registered twice", r.kind, name))
	}
	if r.new == nil {
		r.new = map[string]func() T{}
	}
	r.new[name] = newT
}

func (r *registry[T]) lookup(name string) (T, error) {
	r.mu.RLock()
	newT := r.new[name]
	r.mu.RUnlock()
	if newT == nil {
		var zero T
		return zero, fmt.Errorf("deploy: %s %q, want one of %s", r.kind, name, strings.Join(r.names(), ", "))
	}
	return newT(), nil
}

func (r *registry[T]) names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, 0, len(r.new))
	for name := range r.new {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}
