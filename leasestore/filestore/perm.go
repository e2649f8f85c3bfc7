package filestore

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

// Modes of what the store creates. A store folder that is group-writable
// is shared by the users of its group (a team's jobs on one host, run by
// root and by service accounts): what the store creates in it belongs to
// that group and is readable and writable by it, folders setgid so that
// everything below keeps the group. Any other store folder is its owner's
// alone. The modes are set whatever the umask.
const (
	privateDirMode  os.FileMode = 0o700
	privateFileMode os.FileMode = 0o600
	sharedDirMode   os.FileMode = 0o770 | os.ModeSetgid
	sharedFileMode  os.FileMode = 0o660
)

// access is how the store creates its folders and files.
type access struct {
	shared bool
	gid    int // the store folder's group, when shared
}

// accessOf is the access of the store in folder dir, which exists.
func accessOf(dir string) (access, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return access{}, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || fi.Mode().Perm()&0o020 == 0 {
		return access{}, nil
	}
	return access{shared: true, gid: int(st.Gid)}, nil
}

// mkdirAll makes the folder path and its missing parents with the store's
// access.
func (e *Store) mkdirAll(path string) error {
	if !e.access.shared {
		return os.MkdirAll(path, privateDirMode)
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return nil
	}
	if err := e.mkdirAll(filepath.Dir(path)); err != nil {
		return err
	}
	if err := e.mkdir(path); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}

// mkdir makes the folder path with the store's access: fs.ErrExist if it
// is there already, fs.ErrNotExist if its parent is not. A shared folder
// is made under a name of its own and renamed into place once its group
// and mode are right, so that no other user ever finds it with the
// umask's mode.
func (e *Store) mkdir(path string) error {
	if !e.access.shared {
		return os.Mkdir(path, privateDirMode)
	}
	tmp := path + tmpSuffix()
	if err := os.Mkdir(tmp, privateDirMode); err != nil {
		return err
	}
	if err := e.share(tmp, sharedDirMode); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	// A folder already there takes the place of this one, unless it is
	// empty: then this one replaces it, which nobody can tell apart.
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		if errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, fs.ErrExist) {
			return fs.ErrExist
		}
		return err
	}
	return nil
}

// openCreate opens path with flag, creating the file with the store's
// access if it is missing; fs.ErrNotExist when its folder is. A shared file
// is made under a name of its own and linked into place once its group and
// mode are right.
func (e *Store) openCreate(path string, flag int) (*os.File, error) {
	if !e.access.shared {
		return os.OpenFile(path, flag|os.O_CREATE, privateFileMode)
	}
	f, err := os.OpenFile(path, flag, 0)
	if !errors.Is(err, fs.ErrNotExist) {
		return f, err
	}
	tmp := path + tmpSuffix()
	nf, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, privateFileMode)
	if err != nil {
		return nil, err
	}
	_ = nf.Close()
	defer os.Remove(tmp)
	if err := e.share(tmp, sharedFileMode); err != nil {
		return nil, err
	}
	if err := os.Link(tmp, path); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, err
	}
	return os.OpenFile(path, flag, 0)
}

// share gives path, just made by this process, the store folder's group
// (with chown, when the folder's setgid bit did not already) and mode.
func (e *Store) share(path string, mode os.FileMode) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Gid) != e.access.gid {
		if err := os.Chown(path, -1, e.access.gid); err != nil {
			return fmt.Errorf("giving %s the store folder's group %s: %w", path, groupName(e.access.gid), err)
		}
	}
	return os.Chmod(path, mode)
}

// tmpSuffix names a file or folder in the making, unique to its maker.
func tmpSuffix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return ".tmp-" + hex.EncodeToString(b[:])
}

// permissionHint says who owns path, or the closest folder above it that
// exists, and what to change so that this user may use the store in dir.
func permissionHint(path, dir string, acc access) string {
	at := path
	fi, err := os.Stat(at)
	for err != nil && at != filepath.Dir(at) {
		at = filepath.Dir(at)
		fi, err = os.Stat(at)
	}
	owner := ""
	if st, ok := fiStat(fi); ok {
		owner = fmt.Sprintf("; %s belongs to %s, group %s, mode %s", at, userName(int(st.Uid)), groupName(int(st.Gid)), fi.Mode())
	}
	me := userName(os.Geteuid())
	if acc.shared {
		return fmt.Sprintf("%s: %s may not use it%s. The store folder %s is shared with group %s: add %s to that group, or give what is below it to the group (chgrp -R %s %s && chmod -R g+rwX %s)",
			path, me, owner, dir, groupName(acc.gid), me, groupName(acc.gid), dir, dir)
	}
	return fmt.Sprintf("%s: %s may not use it%s. The store folder %s is not group-writable, so what leasectl creates in it is its creator's alone: run as that user, give each user a store of their own (--store file:///PATH), or share the folder with a group (chgrp -R GROUP %s && chmod -R g+rwX %s && chmod g+s %s)",
		path, me, owner, dir, dir, dir, dir)
}

// fiStat is fi's stat_t, if fi is there and has one.
func fiStat(fi os.FileInfo) (*syscall.Stat_t, bool) {
	if fi == nil {
		return nil, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return st, ok
}

// userName names uid: "user NAME", or "uid N" when it has no name.
func userName(uid int) string {
	id := strconv.Itoa(uid)
	if u, err := user.LookupId(id); err == nil {
		return "user " + u.Username
	}
	return "uid " + id
}

// groupName is gid's name, or its number when it has none: either does
// for chgrp.
func groupName(gid int) string {
	id := strconv.Itoa(gid)
	if g, err := user.LookupGroupId(id); err == nil {
		return g.Name
	}
	return id
}
