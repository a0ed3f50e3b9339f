package main

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"

	"github.com/dlmhq/dlm/dlmserver"
	"github.com/dlmhq/dlm/server/auth"
	"github.com/dlmhq/dlm/server/cluster"
)

// securityFlags are the TLS and authentication settings of `dlm server`.
type securityFlags struct {
	tlsCert, tlsKey, tlsClientCA string
	raftCA, raftCert, raftKey    string
	authTokens, authRules        string
	joinCA, joinTokenFile        string
}

// register adds the flags to fs, each with its environment variable.
func (f *securityFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.tlsCert, "tls-cert", env("DLM_TLS_CERT", ""), "serve gRPC and HTTP over TLS with this certificate chain (PEM; env DLM_TLS_CERT)")
	fs.StringVar(&f.tlsKey, "tls-key", env("DLM_TLS_KEY", ""), "the key of -tls-cert (PEM; env DLM_TLS_KEY)")
	fs.StringVar(&f.tlsClientCA, "tls-client-ca", env("DLM_TLS_CLIENT_CA", ""), "mutual TLS: clients need a certificate these CAs signed; its common name is their identity (env DLM_TLS_CLIENT_CA)")
	fs.StringVar(&f.raftCA, "raft-tls-ca", env("DLM_RAFT_TLS_CA", ""), "Raft over mutual TLS: peers need a node certificate this CA signed (env DLM_RAFT_TLS_CA)")
	fs.StringVar(&f.raftCert, "raft-tls-cert", env("DLM_RAFT_TLS_CERT", ""), "this node's Raft certificate, if not -tls-cert (env DLM_RAFT_TLS_CERT)")
	fs.StringVar(&f.raftKey, "raft-tls-key", env("DLM_RAFT_TLS_KEY", ""), "the key of -raft-tls-cert (env DLM_RAFT_TLS_KEY)")
	fs.StringVar(&f.authTokens, "auth-tokens", env("DLM_AUTH_TOKENS", ""), "bearer tokens: a file of \"identity token\" lines (env DLM_AUTH_TOKENS)")
	fs.StringVar(&f.authRules, "auth-rules", env("DLM_AUTH_RULES", ""), "authorization: a file of \"identity permission prefix\" lines; without it every authenticated identity may do everything (env DLM_AUTH_RULES)")
	fs.StringVar(&f.joinCA, "join-ca", env("DLM_JOIN_CA", ""), "-join over HTTPS: the CA that signed the members' HTTP certificates (env DLM_JOIN_CA)")
	fs.StringVar(&f.joinTokenFile, "join-token-file", env("DLM_JOIN_TOKEN_FILE", ""), "-join with this file's token, which needs the admin permission (env DLM_JOIN_TOKEN_FILE)")
}

// security is what the flags configure.
type security struct {
	tls     *tls.Config
	raftTLS *tls.Config
	tokens  *auth.Tokens
	rules   *auth.Rules
	join    []cluster.Option
}

// load checks the flags and reads the files they name. join says whether
// the node joins a cluster.
func (f *securityFlags) load(join bool) (security, error) {
	var sec security
	var err error
	switch {
	case (f.tlsCert == "") != (f.tlsKey == ""):
		return sec, errors.New("-tls-cert and -tls-key go together")
	case f.tlsClientCA != "" && f.tlsCert == "":
		return sec, errors.New("-tls-client-ca needs -tls-cert and -tls-key (mutual TLS is TLS)")
	case (f.raftCert == "") != (f.raftKey == ""):
		return sec, errors.New("-raft-tls-cert and -raft-tls-key go together")
	case f.raftCert != "" && f.raftCA == "":
		return sec, errors.New("-raft-tls-cert needs -raft-tls-ca (the CA of the cluster's nodes)")
	case f.raftCA != "" && f.raftCert == "" && f.tlsCert == "":
		return sec, errors.New("-raft-tls-ca needs this node's certificate: -raft-tls-cert and -raft-tls-key, or -tls-cert and -tls-key")
	case f.authRules != "" && f.authTokens == "" && f.tlsClientCA == "":
		return sec, errors.New("-auth-rules needs authentication: -auth-tokens or -tls-client-ca")
	case !join && (f.joinCA != "" || f.joinTokenFile != ""):
		return sec, errors.New("-join-ca and -join-token-file go with -join")
	case f.joinTokenFile != "" && f.joinCA == "":
		return sec, errors.New("-join-token-file needs -join-ca: the token is only sent over TLS")
	}
	if f.tlsCert != "" {
		if sec.tls, err = auth.LoadTLS(f.tlsCert, f.tlsKey, f.tlsClientCA); err != nil {
			return sec, err
		}
	}
	if f.raftCA != "" {
		cert, key := f.raftCert, f.raftKey
		if cert == "" {
			cert, key = f.tlsCert, f.tlsKey
		}
		if sec.raftTLS, err = auth.LoadRaftTLS(cert, key, f.raftCA); err != nil {
			return sec, err
		}
	}
	if f.authTokens != "" {
		if sec.tokens, err = auth.LoadTokens(f.authTokens); err != nil {
			return sec, err
		}
	}
	if f.authRules != "" {
		if sec.rules, err = auth.LoadRules(f.authRules); err != nil {
			return sec, err
		}
	}
	if f.joinCA != "" {
		pool, err := auth.LoadCAPool(f.joinCA)
		if err != nil {
			return sec, err
		}
		c := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		if sec.tls != nil {
			c.Certificates = sec.tls.Certificates // for members that ask for a client certificate
		}
		sec.join = append(sec.join, cluster.WithTLS(c))
	}
	if f.joinTokenFile != "" {
		tok, err := dlmserver.ReadTokenFile(f.joinTokenFile)
		if err != nil {
			return sec, fmt.Errorf("-join-token-file: %w", err)
		}
		sec.join = append(sec.join, cluster.WithToken(tok))
	}
	return sec, nil
}
