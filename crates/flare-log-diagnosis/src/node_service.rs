//! Lines a node's own services write into its system log (remote login, mail, cron, time
//! sync, DHCP, web servers): their errors are about that service (sshd failing to bind
//! port 22, sendmail's relay refusing a connection), never the training job's failure,
//! though their words are the ones the signature table reads (`Address already in use`,
//! `Connection refused`). A node's syslog or journal export sits beside a job's logs, so
//! such lines are recognised by their syslog tag and not read as failure evidence.
//!
//! The kernel, the scheduler's daemons (slurmd, slurmstepd), the container runtime and
//! the GPU and fabric services are not in the list: what they log can be the job's cause.

/// Program names (the syslog tag before `[pid]`), lower case.
const NODE_SERVICES: &[&str] = &[
    "anacron",
    "apache2",
    "atd",
    "avahi-daemon",
    "chronyd",
    "cron",
    "crond",
    "cupsd",
    "dbus-daemon",
    "dhclient",
    "dhcpcd",
    "dhcpd",
    "dovecot",
    "exim",
    "exim4",
    "ftpd",
    "gdm",
    "httpd",
    "in.tftpd",
    "login",
    "logrotate",
    "named",
    "nginx",
    "ntpd",
    "ntpdate",
    "postfix",
    "rsyslogd",
    "sendmail",
    "smtpd",
    "snmpd",
    "sshd",
    "su",
    "sudo",
    "syslog-ng",
    "syslogd",
    "systemd-logind",
    "tftpd",
    "vsftpd",
    "xinetd",
];

/// How far into a line a syslog tag is looked for (past a time stamp, a host, a
/// forwarder's fields).
const HEAD: usize = 160;

/// Whether `line` is a node service's own: the first `: ` in its head ends a syslog tag
/// (`sshd[1761]`, `crond(pam_unix)[2915]`, `postfix/smtpd[12]`) naming one, or a journald
/// JSON entry's `SYSLOG_IDENTIFIER` does.
pub fn is_node_service(line: &str) -> bool {
    if let Some(program) = crate::origin::journal_program(line) {
        return is_listed(program.as_bytes());
    }
    let head = &line.as_bytes()[..line.len().min(HEAD)];
    let Some(colon) = head.windows(2).position(|w| w == b": ") else {
        return false;
    };
    let tag = &head[..colon];
    let tag = &tag[tag.iter().rposition(|&b| b == b' ').map_or(0, |i| i + 1)..];
    // the program: before `[pid]` or `(facility)`, after a `suite/` path
    let name = &tag[..tag
        .iter()
        .position(|&b| b == b'[' || b == b'(')
        .unwrap_or(tag.len())];
    is_listed(name)
}

/// Whether a program name (after any `suite/` path) is a listed node service.
fn is_listed(name: &[u8]) -> bool {
    let name = &name[name.iter().rposition(|&b| b == b'/').map_or(0, |i| i + 1)..];
    NODE_SERVICES
        .iter()
        .any(|s| s.as_bytes().eq_ignore_ascii_case(name))
}

#[cfg(test)]
mod tests {
    use super::is_node_service;

    #[test]
    fn service_lines_are_told_by_their_tag() {
        let cases = [
            ("- 1131567055 2005.11.09 tbird-admin1 Nov 9 12:10:55 local@tbird-admin1 sshd[1761]: error: Bind to port 22 on 0.0.0.0 failed: Address already in use.", true),
            ("- 1131566491 2005.11.09 eadmin1 Nov 9 12:01:31 src@eadmin1 sendmail[4306]: jA9J1UvC004306: to=root, stat=Deferred: Connection refused by [127.0.0.1]", true),
            ("Nov  9 12:01:31 node-3 crond(pam_unix)[2915]: session closed for user root", true),
            ("Nov  9 12:01:31 node-3 postfix/smtpd[12]: connect from unknown", true),
            ("Nov  9 12:01:31 node-3 kernel: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.", false),
            ("Nov  9 12:01:31 node-3 slurmstepd[88]: error: *** STEP 1.0 ON node-3 CANCELLED AT 2024-01-02T03:04:05 ***", false),
            ("[rank0]: RuntimeError: The server socket has failed to listen on any local network address.", false),
            ("sshd is not mentioned: here", false),
            // journalctl -o json: the program is SYSLOG_IDENTIFIER (or _COMM), not a tag
            (r#"{"__REALTIME_TIMESTAMP":"1764064992123456","_HOSTNAME":"gpu-node-07","SYSLOG_IDENTIFIER":"sshd","_COMM":"sshd","MESSAGE":"error: Bind to port 22 on 0.0.0.0 failed: Address already in use."}"#, true),
            (r#"{"_HOSTNAME":"gpu-node-07","_COMM":"chronyd","MESSAGE":"Could not resolve address: Connection refused"}"#, true),
            (r#"{"_HOSTNAME":"gpu-node-07","SYSLOG_IDENTIFIER":"kernel","MESSAGE":"sshd: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."}"#, false),
            (r#"{"_HOSTNAME":"gpu-node-07","SYSLOG_IDENTIFIER":"python3","MESSAGE":"[rank0]: RuntimeError: The server socket has failed to listen on any local network address."}"#, false),
            ("", false),
        ];
        for (line, want) in cases {
            assert_eq!(is_node_service(line), want, "{line}");
        }
    }
}
