//go:build !unix

package pgstore

import (
	"context"

	"github.com/jackc/pgx/v5/pgconn"
)

// alive reports whether an idle pooled connection can still carry a call;
// without a way to peek at its socket, only pgconn's own view counts.
func alive(_ context.Context, c *pgconn.PgConn) bool { return !c.IsClosed() }
