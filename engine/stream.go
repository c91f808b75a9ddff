package engine

import (
	"sync"

	"github.com/morphlab/morphlab/engine/kv"
)

// streamBuffer bounds the channel Events returns: events beyond it wait in the stream until the reader has made
// room, and the engine moves them on at its next iteration or idle tick.
const streamBuffer = 256

// Stream is a submitted request's handle: its events as they happen, and its result at the end. It holds only
// the events not yet read and starts no goroutine, so a stream nobody reads costs nothing but those events.
type Stream struct {
	ID   kv.SeqID
	eng  *Engine
	done chan struct{}
	res  Result

	mu      sync.Mutex
	unread  []Event
	ch      chan Event // nil until Events is called
	room    int        // the events the request may still produce, to size ch
	ended   bool       // the last event has been pushed
	closed  bool       // ch is closed
	discard bool       // keep no events (the replay driver reads results only)
	stop    func() bool
}

// Events returns a channel carrying the request's events in order, closed after the one that ends it (Finished,
// Rejected, Cancelled or Failed). The engine never blocks on it: a reader that falls behind by more than the
// channel's buffer gets the rest as it catches up.
func (s *Stream) Events() <-chan Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan Event, len(s.unread)+min(s.room, streamBuffer))
		if s.flushLocked() {
			s.eng.addOverflow(s)
		}
	}
	return s.ch
}

// Wait blocks until the request has ended and returns its result.
func (s *Stream) Wait() Result {
	<-s.done
	return s.res
}

// Done is closed when the request has ended.
func (s *Stream) Done() <-chan struct{} { return s.done }

func (s *Stream) setStop(stop func() bool) {
	s.mu.Lock()
	ended := s.ended
	if !ended {
		s.stop = stop
	}
	s.mu.Unlock()
	if ended {
		stop()
	}
}

// push appends an event for the reader; it tells the engine when some could not be handed over yet.
func (s *Stream) push(ev Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ev.Kind == Token {
		s.room--
	}
	if ev.Kind.ends() {
		s.ended = true
	}
	if s.discard {
		return
	}
	s.unread = append(s.unread, ev)
	if s.flushLocked() {
		s.eng.addOverflow(s)
	}
}

// end closes Done after the last event; the stream's cancel hook (SubmitContext) is released.
func (s *Stream) end() {
	s.mu.Lock()
	stop := s.stop
	s.stop = nil
	s.mu.Unlock()
	if stop != nil {
		stop()
	}
	close(s.done)
}

// flush moves what it can of the unread events into the channel and reports whether some are left.
func (s *Stream) flush() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.flushLocked()
}

func (s *Stream) flushLocked() bool {
	if s.ch == nil {
		return false // no reader yet: the events wait for Events
	}
	n := 0
	for ; n < len(s.unread); n++ {
		select {
		case s.ch <- s.unread[n]:
			continue
		default:
		}
		break
	}
	s.unread = append(s.unread[:0], s.unread[n:]...)
	if len(s.unread) > 0 {
		return true
	}
	s.unread = nil
	if s.ended && !s.closed {
		close(s.ch)
		s.closed = true
	}
	return false
}

// eventLog is a ring of the last size events; next numbers the event to come.
type eventLog struct {
	size int
	buf  []Event
	next uint64
}

func (l *eventLog) add(ev Event) {
	if len(l.buf) < l.size {
		if len(l.buf) == cap(l.buf) { // grow by doubling, never past size
			buf := make([]Event, len(l.buf), min(l.size, max(64, 2*cap(l.buf))))
			copy(buf, l.buf)
			l.buf = buf
		}
		l.buf = append(l.buf, ev)
	} else if l.size > 0 {
		l.buf[l.next%uint64(l.size)] = ev
	}
	l.next++
}

// since copies the events numbered from c on that the ring still holds.
func (l *eventLog) since(c uint64) []Event {
	first := l.next - uint64(len(l.buf))
	c = max(c, first)
	out := make([]Event, 0, l.next-c)
	for i := c; i < l.next; i++ {
		if len(l.buf) < l.size {
			out = append(out, l.buf[i])
		} else {
			out = append(out, l.buf[i%uint64(l.size)])
		}
	}
	return out
}
