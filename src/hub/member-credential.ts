// A member's credential as its registration last accepted it. The registration publishes every new
// credential of an unchanged connection here; the running member swaps it into its client in place
// (src/hub/member.ts), so a rotated token or certificate costs no rebuild and no relist. A change of
// server, CA, TLS server name or scope is not a credential: that rebuilds the member instead.
import type { KubeConfig } from "@kubernetes/client-node"

export interface MemberCredential {
  /** Same connection as the member was built with; its user is the credential. */
  readonly kubeConfig: KubeConfig
  /** The token's JWT exp or the client certificate's notAfter, when the kubeconfig carries one. */
  readonly expiry: Date | undefined
}

export class CredentialFeed {
  #current: MemberCredential
  readonly #listeners = new Set<(c: MemberCredential) => void>()

  constructor(initial: MemberCredential) {
    this.#current = initial
  }

  get current(): MemberCredential {
    return this.#current
  }

  /** Makes `c` current and tells the running member. */
  publish(c: MemberCredential): void {
    this.#current = c
    for (const l of this.#listeners) l(c)
  }

  /** Calls `listener` with every credential published from now on; returns the unsubscribe. */
  subscribe(listener: (c: MemberCredential) => void): () => void {
    this.#listeners.add(listener)
    return () => this.#listeners.delete(listener)
  }
}
