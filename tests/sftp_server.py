"""A small SFTP server (paramiko's server side) for tests: a remote artifact root that the API and the
worker reach over the network through fsspec's sftp:// file system, as they would reach s3://.

    python -m tests.sftp_server ROOT PORT_FILE

serves ROOT as "/" to user `rlplane`, password `rlplane`, on a free port of 127.0.0.1, and writes
that port to PORT_FILE once it listens. Every path is kept inside ROOT.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from pathlib import Path

import paramiko
from paramiko.sftp import SFTP_FAILURE, SFTP_NO_SUCH_FILE, SFTP_OK, SFTP_PERMISSION_DENIED

USER = PASSWORD = "rlplane"


class Auth(paramiko.ServerInterface):
    def get_allowed_auths(self, username: str) -> str:
        return "password"

    def check_auth_password(self, username: str, password: str) -> int:
        ok = (username, password) == (USER, PASSWORD)
        return paramiko.AUTH_SUCCESSFUL if ok else paramiko.AUTH_FAILED

    def check_channel_request(self, kind: str, chanid: int) -> int:
        return paramiko.OPEN_SUCCEEDED if kind == "session" else paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED


class Handle(paramiko.SFTPHandle):
    def stat(self):
        return paramiko.SFTPAttributes.from_stat(os.fstat((self.readfile or self.writefile).fileno()))

    def chattr(self, attr) -> int:
        return SFTP_OK


def _errno(exc: OSError) -> int:
    return paramiko.SFTPServer.convert_errno(exc.errno) if exc.errno else SFTP_FAILURE


class Files(paramiko.SFTPServerInterface):
    """The SFTP operations fsspec uses, on ROOT."""

    root = Path(".")

    def _real(self, path: str) -> Path:
        real = (self.root / self.canonicalize(path).lstrip("/")).resolve()
        if real != self.root and self.root not in real.parents:
            raise PermissionError(path)
        return real

    def canonicalize(self, path: str) -> str:
        return os.path.normpath("/" + path).replace("//", "/")

    def _call(self, fn):
        try:
            return fn()
        except PermissionError:
            return SFTP_PERMISSION_DENIED
        except FileNotFoundError:
            return SFTP_NO_SUCH_FILE
        except OSError as exc:
            return _errno(exc)

    def list_folder(self, path: str):
        def listing():
            folder = self._real(path)
            out = []
            for name in sorted(os.listdir(folder)):
                attr = paramiko.SFTPAttributes.from_stat(os.stat(folder / name))
                attr.filename = name
                out.append(attr)
            return out

        return self._call(listing)

    def stat(self, path: str):
        return self._call(lambda: paramiko.SFTPAttributes.from_stat(os.stat(self._real(path))))

    lstat = stat

    def open(self, path: str, flags: int, attr):
        def opened():
            real = self._real(path)
            fd = os.open(real, flags | getattr(os, "O_BINARY", 0), 0o644)
            if flags & os.O_WRONLY:
                mode = "ab" if flags & os.O_APPEND else "wb"
            elif flags & os.O_RDWR:
                mode = "a+b" if flags & os.O_APPEND else "r+b"
            else:
                mode = "rb"
            handle = Handle(flags)
            file = os.fdopen(fd, mode)
            handle.filename = str(real)
            handle.readfile = file if mode != "wb" and mode != "ab" else None
            handle.writefile = file if mode != "rb" else None
            return handle

        return self._call(opened)

    def remove(self, path: str) -> int:
        return self._call(lambda: os.remove(self._real(path)) or SFTP_OK)

    def rename(self, oldpath: str, newpath: str) -> int:
        return self._call(lambda: os.rename(self._real(oldpath), self._real(newpath)) or SFTP_OK)

    posix_rename = rename

    def mkdir(self, path: str, attr) -> int:
        return self._call(lambda: os.mkdir(self._real(path)) or SFTP_OK)

    def rmdir(self, path: str) -> int:
        return self._call(lambda: os.rmdir(self._real(path)) or SFTP_OK)

    def chattr(self, path: str, attr) -> int:
        return SFTP_OK


def _serve(conn: socket.socket, key: paramiko.PKey) -> None:
    transport = paramiko.Transport(conn)
    transport.add_server_key(key)
    transport.set_subsystem_handler("sftp", paramiko.SFTPServer, Files)
    transport.start_server(server=Auth())
    while transport.is_active():
        transport.join(1.0)


def main(root: str, port_file: str) -> None:
    Files.root = Path(root).resolve()
    Files.root.mkdir(parents=True, exist_ok=True)
    key = paramiko.RSAKey.generate(2048)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(32)
    tmp = Path(port_file + ".tmp")
    tmp.write_text(str(listener.getsockname()[1]))
    tmp.replace(port_file)
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=_serve, args=(conn, key), daemon=True).start()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
