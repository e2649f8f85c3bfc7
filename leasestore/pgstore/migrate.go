package pgstore

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// SQLSTATEs of leasectl's own errors.
const (
	// codeVersion: a function of another schema version was called
	// (lib.sql, _check_version); the detail is the schema's version.
	codeVersion = "LC001"
	// codeNewer: the migration found a schema newer than this leasectl's.
	codeNewer = "LC002"
)

// needsMigration reports whether err says that the namespace's schema is
// missing or at another version than this leasectl's: the call failed
// before doing anything, and a migration may let it through.
func needsMigration(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	switch pe.Code {
	case "3F000", // invalid_schema_name: no schema yet
		"42883",     // undefined_function: a schema without leasectl's functions
		codeVersion: // another version
		return true
	}
	return false
}

// NewerSchemaError says that the namespace's schema was migrated by a newer
// leasectl than this one, which does not know its tables.
type NewerSchemaError struct {
	Schema  string // the namespace's schema
	Version int    // the schema's version
}

// Error names the schema and both versions.
func (e *NewerSchemaError) Error() string {
	return fmt.Sprintf("schema %q is at version %d, newer than this leasectl's %d: upgrade leasectl", e.Schema, e.Version, schemaVersion)
}

// migrateForCall migrates the schema for a call that failed with err (see
// needsMigration), once per Store at a time.
func (s *Store) migrateForCall(ctx context.Context, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == codeVersion {
		if v, convErr := strconv.Atoi(pe.Detail); convErr == nil && v > schemaVersion {
			return &NewerSchemaError{Schema: schemaName(s.ns), Version: v}
		}
	}
	_, _, _, merr := s.Migrate(ctx)
	return merr
}

// Migrate creates the namespace's schema or brings it to this leasectl's
// version, in one transaction under a transaction-scoped advisory lock, so
// that any number of processes may start at once: the first migrates, the
// others wait for it and find nothing left to do but to re-create the
// functions. It returns the schema and its version before and after. The
// first operation of a Store migrates on its own when it needs to;
// `leasectl store migrate` calls Migrate for operators who migrate by hand,
// as a role that may create the schema, and grant the role leasectl runs as
// USAGE on it.
func (s *Store) Migrate(ctx context.Context) (schema string, from, to int, err error) {
	s.migrateMu.Lock()
	defer s.migrateMu.Unlock()
	schema = schemaName(s.ns)
	c, _, err := s.get(ctx)
	if err != nil {
		return schema, 0, 0, s.unavailable("migrate", err)
	}
	defer s.put(c)
	results, err := c.Exec(ctx, MigrationSQL(s.ns)).ReadAll()
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == codeNewer {
			v, _ := strconv.Atoi(pe.Detail)
			return schema, v, v, s.unavailable("migrate", &NewerSchemaError{Schema: schema, Version: v})
		}
		return schema, 0, 0, s.unavailable("migrate", fmt.Errorf("migrating schema %q: %w", schema, err))
	}
	for _, r := range results {
		if len(r.FieldDescriptions) == 1 && r.FieldDescriptions[0].Name == "previous_version" && len(r.Rows) == 1 {
			from, _ = strconv.Atoi(string(r.Rows[0][0]))
		}
	}
	return schema, from, schemaVersion, nil
}

// MigrationSQL is the script Migrate runs for the store's namespace; see
// the package function MigrationSQL.
func (s *Store) MigrationSQL() string { return MigrationSQL(s.ns) }

// advisoryKey is the key of the advisory lock that serialises the
// migrations of namespace's schema.
func advisoryKey(namespace string) int64 {
	sum := sha256.Sum256([]byte("leasectl migrate\n" + namespace))
	return int64(binary.BigEndian.Uint64(sum[:8]))
}

// MigrationSQL is the script that creates namespace's schema, or brings it
// from any earlier version to this leasectl's, in one transaction: what
// Migrate runs, for operators who apply schema changes by hand. It is safe
// to run more than once, and refuses (SQLSTATE LC002) a schema newer than
// this leasectl's.
func MigrationSQL(namespace string) string {
	schema := schemaName(namespace)
	ident := quoteIdent(schema)
	var b strings.Builder
	fmt.Fprintf(&b, "-- leasectl: schema %s at version %d. Run it as the role that owns the schema.\n", ident, schemaVersion)
	b.WriteString("BEGIN;\n")
	fmt.Fprintf(&b, "SELECT pg_advisory_xact_lock(%d);\n", advisoryKey(namespace))
	// CREATE SCHEMA IF NOT EXISTS wants the right to create schemas even
	// when the schema exists; its owner may lack it.
	fmt.Fprintf(&b, "DO $leasectl$ BEGIN\n  IF NOT EXISTS (SELECT FROM pg_namespace WHERE nspname = %s) THEN\n    CREATE SCHEMA %s;\n  END IF;\nEND $leasectl$;\n",
		quoteLiteral(schema), ident)
	fmt.Fprintf(&b, "CREATE TABLE IF NOT EXISTS %s.meta (version integer NOT NULL, migrated_at timestamptz NOT NULL DEFAULT clock_timestamp());\n", ident)
	fmt.Fprintf(&b, "COMMENT ON TABLE %s.meta IS 'leasectl: the schema version';\n", ident)
	fmt.Fprintf(&b, "INSERT INTO %s.meta (version) SELECT 0 WHERE NOT EXISTS (SELECT FROM %[1]s.meta);\n", ident)
	fmt.Fprintf(&b, "SELECT version AS previous_version FROM %s.meta;\n", ident)
	b.WriteString("DO $leasectl$\nDECLARE\n  v integer;\nBEGIN\n")
	fmt.Fprintf(&b, "  SELECT version INTO v FROM %s.meta;\n", ident)
	fmt.Fprintf(&b, "  IF v > %d THEN\n    RAISE EXCEPTION 'schema %%s is at version %%s, newer than this leasectl''s %d', %s, v\n      USING ERRCODE = '%s', DETAIL = v::text;\n  END IF;\n",
		schemaVersion, schemaVersion, quoteLiteral(schema), codeNewer)
	for i, step := range tableSteps() {
		fmt.Fprintf(&b, "  IF v < %d THEN\n    EXECUTE $step$\n%s$step$;\n  END IF;\n", i+1, render(step, namespace))
	}
	b.WriteString("END $leasectl$;\n")
	for _, fn := range functions() {
		b.WriteString(render(fn, namespace))
	}
	fmt.Fprintf(&b, "UPDATE %s.meta SET version = %d, migrated_at = clock_timestamp();\n", ident, schemaVersion)
	b.WriteString("COMMIT;\n")
	return b.String()
}
