package httpapi

import (
	"container/list"
	"sync"

	"github.com/govinfer/govinfer/llm"
)

// storedResponse is a finished response the Responses API keeps (store:
// true): its JSON, answered by GET /v1/responses/{id}, and the
// conversation that continues it (previous_response_id): the messages of
// every turn up to and including this response's output, without the
// instructions, exactly as they rendered, so that a continuation renders
// the same prompt prefix and resumes it from the prefix cache.
type storedResponse struct {
	id           string
	body         []byte
	conversation []llm.Message

	size int64
	elem *list.Element
}

// storedMessageOverhead is what a kept message costs beyond its text, as
// counted against the store's byte bound.
const storedMessageOverhead = 64

// storedSize is the bytes r counts against the store's bound: its JSON and
// the text of its conversation.
func storedSize(r *storedResponse) int64 {
	n := int64(len(r.body)) + int64(len(r.id))
	for _, m := range r.conversation {
		n += storedMessageOverhead + int64(len(m.Role)+len(m.Content)+len(m.Reasoning)+len(m.ToolCallID))
		for _, c := range m.ToolCalls {
			n += storedMessageOverhead + int64(len(c.ID)+len(c.Name)+len(c.Arguments)+len(c.Input))
		}
	}
	return n
}

// responseStore keeps finished responses in memory, bounded in count and
// in bytes; the oldest go first. It is safe for concurrent use.
type responseStore struct {
	mu       sync.Mutex
	maxCount int
	maxBytes int64
	bytes    int64
	byID     map[string]*storedResponse
	order    *list.List // oldest first
}

// newResponseStore returns a store of at most maxCount responses and
// maxBytes bytes. Zero means DefaultResponsesStoreMax or
// DefaultResponsesStoreBytes; a negative bound keeps none.
func newResponseStore(maxCount int, maxBytes int64) *responseStore {
	if maxCount == 0 {
		maxCount = DefaultResponsesStoreMax
	}
	if maxBytes == 0 {
		maxBytes = DefaultResponsesStoreBytes
	}
	return &responseStore{maxCount: maxCount, maxBytes: maxBytes, byID: map[string]*storedResponse{}, order: list.New()}
}

// put keeps r, evicting the oldest responses until the bounds hold. A
// response larger than the byte bound alone is not kept; put reports
// whether r was.
func (st *responseStore) put(r *storedResponse) bool {
	if st == nil || st.maxCount < 0 || st.maxBytes < 0 {
		return false
	}
	r.size = storedSize(r)
	if r.size > st.maxBytes {
		return false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if old, ok := st.byID[r.id]; ok {
		st.remove(old)
	}
	for st.order.Len() > 0 && (st.order.Len() >= st.maxCount || st.bytes+r.size > st.maxBytes) {
		st.remove(st.order.Front().Value.(*storedResponse))
	}
	r.elem = st.order.PushBack(r)
	st.byID[r.id] = r
	st.bytes += r.size
	return true
}

// remove drops r; st.mu is held.
func (st *responseStore) remove(r *storedResponse) {
	st.order.Remove(r.elem)
	delete(st.byID, r.id)
	st.bytes -= r.size
}

// get returns the response with the given id.
func (st *responseStore) get(id string) (*storedResponse, bool) {
	if st == nil {
		return nil, false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	r, ok := st.byID[id]
	return r, ok
}

// delete drops the response with the given id and reports whether it was
// kept.
func (st *responseStore) delete(id string) bool {
	if st == nil {
		return false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	r, ok := st.byID[id]
	if ok {
		st.remove(r)
	}
	return ok
}

// stats returns the number of responses kept and their bytes.
func (st *responseStore) stats() (int, int64) {
	if st == nil {
		return 0, 0
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.order.Len(), st.bytes
}
