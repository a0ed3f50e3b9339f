package httpapi

import (
	"net/http"

	"github.com/dlmhq/dlm/api/dlmpb"
)

// resources serves one page of List: at most limit resources and locks
// locks, from after (the next of the page before).
func (a *api) resources(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, locks, ok := pageParams(w, q)
	if !ok {
		return
	}
	resp, err := a.svc.List(r.Context(), &dlmpb.ListRequest{Prefix: q.Get("prefix"), After: q.Get("after"), Limit: int32(limit), LockLimit: int32(locks)})
	if err != nil {
		writeStatusError(w, err)
		return
	}
	writeProto(w, resp)
}

// sessions lists the open sessions and their locks, in id order; for a
// caller whose list permission does not cover every name, only the
// sessions that hold or await a resource it covers, each with those locks
// only (see Service.Sessions). The answer is a dlmpb.SessionPage:
// {"sessions": [...], "next": cursor}, next empty at the end; pass it as
// after for the next page.
func (a *api) sessions(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, locks, ok := pageParams(w, q)
	if !ok {
		return
	}
	page, err := a.svc.Sessions(a.auth.Caller(r.Context()), q.Get("after"), limit, locks)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	writeProto(w, page)
}

// status serves the node's Status as JSON.
func (a *api) status(w http.ResponseWriter, r *http.Request) {
	st, err := a.svc.Status(r.Context(), &dlmpb.StatusRequest{})
	if err != nil {
		writeStatusError(w, err)
		return
	}
	writeProto(w, st)
}
