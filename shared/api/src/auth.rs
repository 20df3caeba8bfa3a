//! Which organization a caller acts for, as its token says: the `org_id` claim, and the
//! Amazon Cognito trigger that puts it in the access tokens of a user pool's app clients.
//!
//! The API takes the organization from the token only ([`ORG_CLAIM`], checked by API
//! Gateway's JWT authorizer before the function runs). Any OIDC provider that can add a custom
//! claim can issue such tokens; for Cognito, the `token` function is the user pool's
//! pre-token-generation trigger (event version 3, which Cognito also sends for client-credentials
//! grants): each app client is one caller, acting for the one organization
//! [`ClientOrganizations`] maps it to. A client the map does not name gets no token at all,
//! rather than a token every route would refuse.

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

/// The claim that carries the organization (a UUID).
pub const ORG_CLAIM: &str = "org_id";

/// The environment variable [`ClientOrganizations::from_env`] reads.
pub const CLIENT_ORGANIZATIONS_VAR: &str = "CLIENT_ORGANIZATIONS";

/// A mistake in the app-client map, or an event the trigger cannot answer.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AuthError {
    #[error(
        "{CLIENT_ORGANIZATIONS_VAR}: entry {0:?} is not CLIENT_ID=ORGANIZATION_UUID \
         (entries are comma-separated)"
    )]
    BadEntry(String),
    #[error("{CLIENT_ORGANIZATIONS_VAR}: app client {0} is mapped to two organizations")]
    TwoOrganizations(String),
    #[error(
        "pre-token-generation event version {0:?}: set the user pool's trigger to \
         LambdaVersion V3_0 (V2_0 for user sign-in only), which can add claims to access tokens"
    )]
    Version(String),
    #[error("not a pre-token-generation event: {0}")]
    Event(String),
    #[error(
        "app client {0} acts for no organization: add `{0}=ORGANIZATION_UUID` to the stack's \
         CognitoClientOrganizations (and the client to JwtAudience)"
    )]
    UnknownClient(String),
}

/// Each app client's organization: `CLIENT_ID=ORGANIZATION_UUID` entries, comma-separated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientOrganizations(HashMap<String, Uuid>);

impl ClientOrganizations {
    /// Parses the map; blanks around entries are ignored, an empty text is an empty map.
    pub fn parse(text: &str) -> Result<Self, AuthError> {
        let mut map = HashMap::new();
        for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let bad = || AuthError::BadEntry(entry.to_owned());
            let (client, org) = entry.split_once('=').ok_or_else(bad)?;
            let (client, org) = (client.trim(), org.trim());
            let valid_client = !client.is_empty() && client.bytes().all(|b| b.is_ascii_graphic());
            let org = Uuid::parse_str(org)
                .ok()
                .filter(|_| valid_client)
                .ok_or_else(bad)?;
            if map
                .insert(client.to_owned(), org)
                .is_some_and(|was| was != org)
            {
                return Err(AuthError::TwoOrganizations(client.to_owned()));
            }
        }
        Ok(Self(map))
    }

    /// [`CLIENT_ORGANIZATIONS_VAR`] from the environment (unset: an empty map).
    pub fn from_env() -> Result<Self, AuthError> {
        Self::parse(&std::env::var(CLIENT_ORGANIZATIONS_VAR).unwrap_or_default())
    }

    pub fn organization(&self, client_id: &str) -> Option<Uuid> {
        self.0.get(client_id).copied()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The fields of the event the trigger reads; the rest is handed back as it came.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PreTokenEvent {
    version: String,
    trigger_source: String,
    caller_context: CallerContext,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CallerContext {
    client_id: String,
}

/// What the trigger answers Cognito: `event` with [`ORG_CLAIM`] added to the access token
/// (`response.claimsAndScopeOverrideDetails.accessTokenGeneration.claimsToAddOrOverride`),
/// for the organization of the app client that asked (`callerContext.clientId`), and the
/// organization it chose. Any other override the event already carries is kept.
pub fn add_org_claim(
    mut event: Value,
    organizations: &ClientOrganizations,
) -> Result<(Value, Uuid), AuthError> {
    let read: PreTokenEvent =
        serde_json::from_value(event.clone()).map_err(|e| AuthError::Event(e.to_string()))?;
    if !read.trigger_source.starts_with("TokenGeneration_") {
        return Err(AuthError::Event(format!(
            "triggerSource {:?}",
            read.trigger_source
        )));
    }
    if !matches!(read.version.as_str(), "2" | "3") {
        return Err(AuthError::Version(read.version));
    }
    let client = read.caller_context.client_id;
    let org = organizations
        .organization(&client)
        .ok_or(AuthError::UnknownClient(client))?;
    let Some(root) = event.as_object_mut() else {
        return Err(AuthError::Event("not a JSON object".into()));
    };
    let mut at: &mut Value = root.entry("response").or_insert_with(|| json!({}));
    for key in [
        "claimsAndScopeOverrideDetails",
        "accessTokenGeneration",
        "claimsToAddOrOverride",
    ] {
        if !at.is_object() {
            *at = json!({});
        }
        at = at
            .as_object_mut()
            .expect("made an object above")
            .entry(key)
            .or_insert(Value::Null);
    }
    if !at.is_object() {
        *at = json!({});
    }
    at.as_object_mut()
        .expect("made an object above")
        .insert(ORG_CLAIM.to_owned(), Value::String(org.to_string()));
    Ok((event, org))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ORG: &str = "0190d6a2-7b3c-7def-8a12-3456789abcde";

    /// A client-credentials event as Cognito sends it (version 3; the user pool's docs).
    fn event(client: &str) -> Value {
        json!({
            "version": "3",
            "triggerSource": "TokenGeneration_ClientCredentials",
            "region": "us-east-1",
            "userPoolId": "us-east-1_EXAMPLE",
            "userName": null,
            "callerContext": {"awsSdkVersion": "aws-sdk-unknown-unknown", "clientId": client},
            "request": {
                "userAttributes": {},
                "groupConfiguration": null,
                "scopes": ["notification-service/send"],
                "clientMetadata": {}
            },
            "response": {"claimsAndScopeOverrideDetails": null}
        })
    }

    #[test]
    fn the_client_gets_its_organization_as_org_id_in_the_access_token() {
        let map = ClientOrganizations::parse(&format!("1abc={ORG}")).unwrap();
        let (answer, org) = add_org_claim(event("1abc"), &map).unwrap();
        assert_eq!(org.to_string(), ORG);
        assert_eq!(
            answer["response"]["claimsAndScopeOverrideDetails"]["accessTokenGeneration"]["claimsToAddOrOverride"],
            json!({"org_id": ORG})
        );
        // the rest of the event is handed back as it came
        assert_eq!(answer["request"], event("1abc")["request"]);
    }

    #[test]
    fn other_overrides_are_kept() {
        let map = ClientOrganizations::parse(&format!("c={ORG}")).unwrap();
        let mut with = event("c");
        with["response"]["claimsAndScopeOverrideDetails"] = json!({
            "accessTokenGeneration": {"claimsToAddOrOverride": {"tier": "gold"}, "scopesToAdd": ["x/y"]}
        });
        let (answer, _) = add_org_claim(with, &map).unwrap();
        let access = &answer["response"]["claimsAndScopeOverrideDetails"]["accessTokenGeneration"];
        assert_eq!(
            access["claimsToAddOrOverride"],
            json!({"tier": "gold", "org_id": ORG})
        );
        assert_eq!(access["scopesToAdd"], json!(["x/y"]));
    }

    #[test]
    fn a_client_the_map_does_not_name_gets_no_token() {
        let map = ClientOrganizations::parse(&format!("c={ORG}")).unwrap();
        assert_eq!(
            add_org_claim(event("stranger"), &map),
            Err(AuthError::UnknownClient("stranger".into()))
        );
        assert!(matches!(
            add_org_claim(event("c"), &ClientOrganizations::default()),
            Err(AuthError::UnknownClient(_))
        ));
    }

    #[test]
    fn a_version_1_event_or_another_trigger_is_refused() {
        let map = ClientOrganizations::parse(&format!("c={ORG}")).unwrap();
        let mut v1 = event("c");
        v1["version"] = json!("1");
        assert_eq!(add_org_claim(v1, &map), Err(AuthError::Version("1".into())));
        let mut signup = event("c");
        signup["triggerSource"] = json!("PreSignUp_SignUp");
        assert!(matches!(
            add_org_claim(signup, &map),
            Err(AuthError::Event(_))
        ));
        assert!(matches!(
            add_org_claim(json!([1]), &map),
            Err(AuthError::Event(_))
        ));
        assert!(matches!(
            add_org_claim(json!({}), &map),
            Err(AuthError::Event(_))
        ));
    }

    #[test]
    fn the_map_refuses_what_it_cannot_read() {
        for bad in [
            "c",
            "c=",
            "=0190d6a2-7b3c-7def-8a12-3456789abcde",
            "c=not-a-uuid",
            "a b=0190d6a2-7b3c-7def-8a12-3456789abcde",
        ] {
            assert_eq!(
                ClientOrganizations::parse(bad),
                Err(AuthError::BadEntry(bad.into())),
                "{bad}"
            );
        }
        let other = "0190d6a2-7b3c-7def-8a12-000000000000";
        assert_eq!(
            ClientOrganizations::parse(&format!("c={ORG},c={other}")),
            Err(AuthError::TwoOrganizations("c".into()))
        );
        let map = ClientOrganizations::parse(&format!(" c={ORG} ,, c={ORG}, d={other}")).unwrap();
        assert_eq!(map.len(), 2);
        assert!(ClientOrganizations::parse("").unwrap().is_empty());
    }
}
