package etcdstore

// The messages of etcd's v3 API as its JSON gateway spells them: bytes in
// base64, 64-bit integers as decimal strings, zero values left out.

type header struct {
	Revision int64 `json:"revision,string"`
}

type keyValue struct {
	Key            []byte `json:"key"`
	Value          []byte `json:"value"`
	CreateRevision int64  `json:"create_revision,string"`
	ModRevision    int64  `json:"mod_revision,string"`
	Lease          int64  `json:"lease,string"`
}

type rangeRequest struct {
	Key       []byte `json:"key"`
	RangeEnd  []byte `json:"range_end,omitempty"`
	KeysOnly  bool   `json:"keys_only,omitempty"`
	CountOnly bool   `json:"count_only,omitempty"`
	Limit     int64  `json:"limit,string,omitempty"`
}

type rangeResponse struct {
	Header header     `json:"header"`
	KVs    []keyValue `json:"kvs"`
	Count  int64      `json:"count,string"`
}

type putRequest struct {
	Key   []byte `json:"key"`
	Value []byte `json:"value"`
	Lease int64  `json:"lease,omitempty,string"`
}

type deleteRequest struct {
	Key []byte `json:"key"`
}

// requestOp is one operation of a transaction; exactly one field is set.
type requestOp struct {
	Range  *rangeRequest  `json:"request_range,omitempty"`
	Put    *putRequest    `json:"request_put,omitempty"`
	Delete *deleteRequest `json:"request_delete_range,omitempty"`
}

type responseOp struct {
	Range *rangeResponse `json:"response_range"`
}

// compare is a transaction's guard on a key's mod revision: equal to the
// one read (0: the key does not exist), or, over a range of keys, less
// than a revision (no key of the range written since).
type compare struct {
	Key         []byte `json:"key"`
	RangeEnd    []byte `json:"range_end,omitempty"`
	Target      string `json:"target"`
	Result      string `json:"result"`
	ModRevision int64  `json:"mod_revision,string"`
}

type txnRequest struct {
	Compare []compare   `json:"compare,omitempty"`
	Success []requestOp `json:"success,omitempty"`
	Failure []requestOp `json:"failure,omitempty"`
}

type txnResponse struct {
	Header    header       `json:"header"`
	Succeeded bool         `json:"succeeded"`
	Responses []responseOp `json:"responses"`
}

type leaseGrantRequest struct {
	TTL int64 `json:"TTL,string"`
}

type leaseResponse struct {
	ID         int64  `json:"ID,string"`
	TTL        int64  `json:"TTL,string"`
	GrantedTTL int64  `json:"grantedTTL,string"`
	Error      string `json:"error"`
}

type leaseIDRequest struct {
	ID int64 `json:"ID,string"`
}

type watchCreate struct {
	Key           []byte   `json:"key"`
	RangeEnd      []byte   `json:"range_end,omitempty"`
	StartRevision int64    `json:"start_revision,omitempty,string"`
	Filters       []string `json:"filters,omitempty"`
	PrevKV        bool     `json:"prev_kv,omitempty"`
}

type watchRequest struct {
	Create *watchCreate `json:"create_request"`
}

type watchResponse struct {
	Result *struct {
		Header          header       `json:"header"`
		Created         bool         `json:"created"`
		Canceled        bool         `json:"canceled"`
		CompactRevision int64        `json:"compact_revision,string"`
		Events          []watchEvent `json:"events"`
	} `json:"result"`
	Error *etcdError `json:"error"`
}

// watchEvent is one change a watch reports.
type watchEvent struct {
	Type   string    `json:"type"`
	KV     keyValue  `json:"kv"`
	PrevKV *keyValue `json:"prev_kv"`
}
