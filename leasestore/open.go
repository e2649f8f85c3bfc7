package leasestore

import "context"

// Open opens the store at loc with keys under namespace. Neither store talks
// to its backend here: the first operation does, so start-up stays cheap and
// errors surface with the operation that met them.
func Open(ctx context.Context, loc Location, namespace string) (Store, error) {
	switch loc.Kind {
	case KindRedis:
		return OpenRedis(ctx, loc.URL, namespace)
	default:
		return OpenEmbedded(loc.Dir, namespace)
	}
}
