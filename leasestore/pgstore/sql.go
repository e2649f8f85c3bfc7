package pgstore

import (
	"crypto/sha256"
	_ "embed" // the SQL files
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/leasectl/leasectl/leasestore"
)

// The SQL lives in sql/, one file per operation, each opening with a
// comment that lists its parameters and what it returns, as the Redis
// store's Lua scripts do. The files are templates: @schema@ is the
// namespace's schema, @ns@ the namespace as a string literal, @version@ the
// schema version, @history@ the events kept per job.
var (
	//go:embed sql/tables_v1.sql
	tablesV1SQL string
	//go:embed sql/tables_v2.sql
	tablesV2SQL string
	//go:embed sql/tables_v3.sql
	tablesV3SQL string
	//go:embed sql/tables_v4.sql
	tablesV4SQL string
	//go:embed sql/tables_v5.sql
	tablesV5SQL string
	//go:embed sql/tables_v6.sql
	tablesV6SQL string
	//go:embed sql/tables_v7.sql
	tablesV7SQL string
	//go:embed sql/notices.sql
	noticesSQL string
	//go:embed sql/lib.sql
	libSQL string
	//go:embed sql/acquire.sql
	acquireSQL string
	//go:embed sql/renew.sql
	renewSQL string
	//go:embed sql/release.sql
	releaseSQL string
	//go:embed sql/recordlate.sql
	recordLateSQL string
	//go:embed sql/scan.sql
	scanSQL string
	//go:embed sql/quarantine.sql
	quarantineSQL string
	//go:embed sql/unquarantine.sql
	unquarantineSQL string
	//go:embed sql/stop.sql
	stopSQL string
	//go:embed sql/jobs.sql
	jobsSQL string
	//go:embed sql/status.sql
	statusSQL string
	//go:embed sql/leases.sql
	leasesSQL string
	//go:embed sql/quarantined.sql
	quarantinedSQL string
	//go:embed sql/counts.sql
	countsSQL string
	//go:embed sql/checktoken.sql
	checkTokenSQL string
	//go:embed sql/expect.sql
	expectSQL string
	//go:embed sql/overdue.sql
	overdueSQL string
	//go:embed sql/leave.sql
	leaveSQL string
)

// schemaVersion is the version of the schema this leasectl works with.
// Every function checks it (SQLSTATE LC001 when it differs), so that a
// client never runs against tables it does not know. Version 2 added
// regions, round trips and the holder that gave up on its grant
// (sql/tables_v2.sql); version 3 an operator's request that a run stop,
// and the outcome a history event carries (sql/tables_v3.sql); version 4
// jobs' expectations, with an index by due time (sql/tables_v4.sql);
// version 5 runs per slot and the queue of waiters (sql/tables_v5.sql);
// version 6 the notices a reaper sends (sql/tables_v6.sql, a table of its
// own); version 7 waiters woken in their turn, each on a channel of its
// own (sql/tables_v7.sql: the functions alone).
const schemaVersion = 7

// tableSteps are the SQL that takes the tables from one version to the
// next: tableSteps()[i] from version i to i+1. A step only ever adds to
// the tables the steps before it made (version 5 widened the runs' key
// from the job to the job and slot, every run kept in slot 0); it may drop
// the previous version's functions, which every migration makes again.
func tableSteps() []string {
	return []string{tablesV1SQL, tablesV2SQL, tablesV3SQL, tablesV4SQL, tablesV5SQL, tablesV6SQL, tablesV7SQL}
}

// functions are the SQL of the current version's functions. Every
// migration replaces them all (CREATE OR REPLACE), after the table steps.
func functions() []string {
	return []string{
		libSQL, acquireSQL, renewSQL, releaseSQL, recordLateSQL, scanSQL, quarantineSQL, unquarantineSQL, stopSQL, jobsSQL,
		statusSQL, leasesSQL, quarantinedSQL, countsSQL, checkTokenSQL,
		expectSQL, overdueSQL, leaveSQL, noticesSQL,
	}
}

// maxIdentLen is PostgreSQL's longest identifier, in bytes (NAMEDATALEN-1);
// a longer one would be truncated silently.
const maxIdentLen = 63

// schemaName is the schema that keeps namespace's tables: the namespace
// itself when it fits in an identifier; else its first 46 bytes, '~' and 16
// hex digits of its SHA-256. '~' is no namespace character, so the long
// form never names another namespace's schema.
func schemaName(namespace string) string {
	if len(namespace) <= maxIdentLen {
		return namespace
	}
	sum := sha256.Sum256([]byte(namespace))
	return namespace[:maxIdentLen-17] + "~" + hex.EncodeToString(sum[:8])
}

// quoteIdent quotes s as an SQL identifier.
func quoteIdent(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}

// quoteLiteral quotes s as an SQL string literal.
func quoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// render fills the placeholders of an SQL template for namespace.
func render(template, namespace string) string {
	return strings.NewReplacer(
		"@schema@", quoteIdent(schemaName(namespace)),
		"@ns@", quoteLiteral(namespace),
		"@version@", strconv.Itoa(schemaVersion),
		"@history@", strconv.Itoa(leasestore.HistoryLimit),
	).Replace(template)
}
