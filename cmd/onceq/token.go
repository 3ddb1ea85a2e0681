package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/onceq/onceq/auth"
)

func newTokenCmd(g *globals) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Create, list and revoke the tokens of onceq serve",
		Long: `Tokens open onceq serve's HTTP API and console, each for one namespace (or "*",
every namespace: an operator's), read-write or read-only. They are kept hashed
in the compacted topic onceq-tokens, which every server follows: a token created
or revoked here is seen by running servers within a fetch.`,
	}
	cmd.PersistentFlags().DurationVar(&timeout, "timeout", 30*time.Second, "give up after this long")
	cmd.AddCommand(newTokenCreateCmd(g, &timeout), newTokenListCmd(g, &timeout), newTokenRevokeCmd(g, &timeout), newTokenAccountCmd(g))
	return cmd
}

func newTokenAccountCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "account NAME",
		Short: "Print an admin account's line for onceq serve --admin-accounts, its password read from standard input",
		Long: `Print name:bcrypt-hash, a line of the htpasswd file onceq serve --admin-accounts
reads: the admin API then takes the account's name and password by HTTP basic
auth, as lmstfy's admin accounts. The password (12 to 72 bytes) is read from
standard input, so that it stays out of the shell's history and the process
list; it is never stored, only its hash.`,
		Example: `  read -rs PASS && echo "$PASS" | onceq token account ops >> admin-accounts`,
		Args:    exactArgs(1, "one account name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			pw, err := io.ReadAll(io.LimitReader(g.stdin, 1024))
			if err != nil {
				return err
			}
			line, err := auth.HashPassword(args[0], pw)
			if err != nil {
				return usageError{err}
			}
			_, err = fmt.Fprintln(g.stdout, line)
			return err
		},
	}
}

// withTokens opens the token store and runs fn.
func withTokens(cmd *cobra.Command, g *globals, timeout time.Duration, fn func(context.Context, *auth.Store) error) error {
	return withStore(cmd, g, timeout, auth.Open, fn)
}

func newTokenCreateCmd(g *globals, timeout *time.Duration) *cobra.Command {
	var readOnly bool
	var desc string
	cmd := &cobra.Command{
		Use:   "create NAMESPACE",
		Short: "Create a token for a namespace (\"*\" for every one) and print it: it is shown only once",
		Example: `  onceq token create shop --description "checkout service"
  onceq token create '*' --read-only --description "on-call console"`,
		Args: exactArgs(1, "one namespace"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := auth.ValidateNamespace(args[0]); err != nil {
				return usageError{err}
			}
			if len(desc) > 256 {
				return usagef("--description of %d bytes: at most 256", len(desc))
			}
			return withTokens(cmd, g, *timeout, func(ctx context.Context, s *auth.Store) error {
				tok, _, err := s.Create(ctx, args[0], readOnly, desc)
				if err != nil {
					return err
				}
				_, err = fmt.Fprintln(g.stdout, tok)
				return err
			})
		},
	}
	cmd.Flags().BoolVar(&readOnly, "read-only", false, "the token reads and never writes (no publish, ack, cancel, pause, requeue)")
	cmd.Flags().StringVar(&desc, "description", "", "what the token is for, shown by token list")
	return cmd
}

func newTokenListCmd(g *globals, timeout *time.Duration) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list [NAMESPACE]",
		Short: "List the tokens (their IDs, never their secrets)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ns := ""
			if len(args) == 1 {
				ns = args[0]
				if err := auth.ValidateNamespace(ns); err != nil {
					return usageError{err}
				}
			}
			return withTokens(cmd, g, *timeout, func(_ context.Context, s *auth.Store) error {
				toks := s.List(ns)
				if asJSON {
					return writeJSONLines(g.stdout, toks)
				}
				tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tNAMESPACE\tACCESS\tCREATED\tDESCRIPTION")
				for _, t := range toks {
					access := "read-write"
					if t.ReadOnly {
						access = "read-only"
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.ID, t.Namespace, access, t.Created.UTC().Format(time.RFC3339), t.Description)
				}
				return tw.Flush()
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object per token")
	return cmd
}

func newTokenRevokeCmd(g *globals, timeout *time.Duration) *cobra.Command {
	return &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke a token by its ID (token list shows them)",
		Args:  exactArgs(1, "one token ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !auth.ValidID(args[0]) {
				return usagef("token ID %q: want the 16 hex digits after \"oq_\" in the token, as token list shows them", args[0])
			}
			return withTokens(cmd, g, *timeout, func(ctx context.Context, s *auth.Store) error {
				if err := s.Revoke(ctx, args[0]); err != nil {
					return err
				}
				_, err := fmt.Fprintf(g.stdout, "revoked %s\n", args[0])
				return err
			})
		},
	}
}
