"""Certificates for the TLS tests, made with openssl (P-256 keys, valid for
a day) in a directory the caller owns and removes:

    ca.pem, ca.key            the test CA ("statecache-test-ca")
    server.pem, server.key    statecached's, for IP 127.0.0.1 and DNS
                              localhost, signed by the test CA
    ops.*, eng.*              client certificates (CN=ops, CN=eng: the
                              principals x509:ops, x509:eng), signed by it
    other-ca.pem, other-ca.key  a second CA, which signed nothing above
    stranger.pem, stranger.key  a client certificate (CN=stranger) signed
                              by the second CA
    NAME.csr                  each certificate's signing request (not a
                              certificate: for tests of what is refused)

Used by test_tls.py and tests/ctl/ctl_test.py (which imports it by path);
only the standard library, so either can.
"""

import os
import subprocess

__all__ = ["Pki"]


def _openssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True,
                   capture_output=True, timeout=60)


def _make_ca(directory, name, common_name):
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt",
             "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
             name + ".key", "-out", name + ".pem", "-subj",
             "/CN=" + common_name, "-days", "1", cwd=directory)


def _issue(directory, name, subject, extensions=None, ca="ca"):
    """A P-256 key and a certificate for `subject` signed by CA `ca`."""
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", name + ".key", "-out", name + ".csr",
             "-subj", subject, cwd=directory)
    args = ["x509", "-req", "-in", name + ".csr", "-CA", ca + ".pem", "-CAkey",
            ca + ".key", "-CAcreateserial", "-days", "1", "-out",
            name + ".pem"]
    if extensions:
        with open(os.path.join(directory, name + ".ext"), "w") as f:
            f.write(extensions + "\n")
        args += ["-extfile", name + ".ext"]
    _openssl(*args, cwd=directory)


class Pki:
    """Makes every file listed in the module's docstring in `directory`
    (which must exist)."""

    def __init__(self, directory):
        self.dir = str(directory)
        _make_ca(self.dir, "ca", "statecache-test-ca")
        _issue(self.dir, "server", "/CN=statecached",
               "subjectAltName=IP:127.0.0.1,DNS:localhost")
        _issue(self.dir, "ops", "/CN=ops")
        _issue(self.dir, "eng", "/CN=eng")
        _make_ca(self.dir, "other-ca", "statecache-other-test-ca")
        _issue(self.dir, "stranger", "/CN=stranger", ca="other-ca")

    def path(self, name):
        return os.path.join(self.dir, name)

    def read(self, name):
        with open(self.path(name), "rb") as f:
            return f.read()
