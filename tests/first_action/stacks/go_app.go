// A Go net/http service using the standard library only (Debian's golang, Go 1.19): every
// error body here is net/http's own. http.Error writes the text and a newline as text/plain
// (net/http/server.go); ServeMux answers "404 page not found"; http.MaxBytesReader fails a
// read past its limit with "http: request body too large" (net/http/request.go);
// http.TimeoutHandler answers 503 with its message when the handler runs over
// (net/http/server.go, timeoutHandler); FileServer answers "404 page not found" and, for a
// method it does not serve, 405 via the mux's handler.
package main

import (
	"encoding/json"
	"net/http"
	"os"
	"time"
)

var items = map[string]string{"1": "apple"}

func item(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Path[len("/items/"):]
	switch r.Method {
	case http.MethodGet:
		name, ok := items[id]
		if !ok {
			http.Error(w, "item "+id+" not found", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]string{"id": id, "name": name})
	default:
		w.Header().Set("Allow", "GET")
		http.Error(w, http.StatusText(http.StatusMethodNotAllowed), http.StatusMethodNotAllowed)
	}
}

func create(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 1024)
	var body struct {
		Name string `json:"name"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		if err.Error() == "http: request body too large" {
			http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "invalid JSON: "+err.Error(), http.StatusBadRequest)
		return
	}
	for _, name := range items {
		if name == body.Name {
			http.Error(w, "an item named \""+body.Name+"\" already exists", http.StatusConflict)
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	json.NewEncoder(w).Encode(map[string]string{"id": "2", "name": body.Name})
}

func slow(w http.ResponseWriter, r *http.Request) {
	time.Sleep(3 * time.Second)
	w.Write([]byte("done"))
}

func main() {
	mux := http.NewServeMux()
	mux.HandleFunc("/items/", item)
	mux.HandleFunc("/items", create)
	mux.Handle("/slow", http.TimeoutHandler(http.HandlerFunc(slow), 500*time.Millisecond, "the report took too long to build"))
	http.ListenAndServe("127.0.0.1:"+os.Args[1], mux)
}
