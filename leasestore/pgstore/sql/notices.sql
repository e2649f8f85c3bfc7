-- notices: the notices' records, for the rules of package rules applied in
-- Go (leasestore/noticebook's Shelf): not a hot path, and one compare-and-
-- swap keeps the rules written once.
-- Parameters: schema version first, then as each function says.

-- notice_create stores p_rec under p_key unless the key is there.
-- Returns true when it stored it.
CREATE OR REPLACE FUNCTION @schema@.notice_create(p_version integer, p_key text, p_rec text) RETURNS json
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  n integer;
BEGIN
  PERFORM @schema@._check_version(p_version);
  INSERT INTO @schema@.notices (key, rec) VALUES (p_key, p_rec) ON CONFLICT (key) DO NOTHING;
  GET DIAGNOSTICS n = ROW_COUNT;
  RETURN to_json(n = 1);
END $$;

-- notice_get returns p_key's record as a JSON string; null when none.
CREATE OR REPLACE FUNCTION @schema@.notice_get(p_version integer, p_key text) RETURNS json
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  PERFORM @schema@._check_version(p_version);
  RETURN coalesce((SELECT to_json(rec) FROM @schema@.notices WHERE key = p_key), 'null'::json);
END $$;

-- notice_load returns every record, as an array of JSON strings.
CREATE OR REPLACE FUNCTION @schema@.notice_load(p_version integer) RETURNS json
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  PERFORM @schema@._check_version(p_version);
  RETURN (SELECT coalesce(json_agg(rec), '[]'::json) FROM @schema@.notices);
END $$;

-- notice_swap replaces p_key's record by p_rec (NULL deletes it) if it is
-- still p_old. Returns true when it did.
CREATE OR REPLACE FUNCTION @schema@.notice_swap(p_version integer, p_key text, p_old text, p_rec text) RETURNS json
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  n integer;
BEGIN
  PERFORM @schema@._check_version(p_version);
  IF p_rec IS NULL THEN
    DELETE FROM @schema@.notices WHERE key = p_key AND rec = p_old;
  ELSE
    UPDATE @schema@.notices SET rec = p_rec WHERE key = p_key AND rec = p_old;
  END IF;
  GET DIAGNOSTICS n = ROW_COUNT;
  RETURN to_json(n = 1);
END $$;
