"""What each AgentDojo function is, declared as code: its tier, whether a third party can write its results, egress.

The tier follows one plain rule: reads are READ_ONLY, writes EXTERNAL_REVERSIBLE, money and deletes
IRREVERSIBLE. `untrusted`: the results hold text someone other than the user can write (an email's
body, a calendar invitation, a shared file, a review, a Slack message, a web page, an incoming
transfer's subject). `egress`: the call sends data out of the user's hands (email, HTTP, posting,
sharing, inviting, paying, booking). The declarations are made from what each function does, not from
where AgentDojo happens to place its injection vectors; the harness counts any injection that reaches
the executor through a function declared trusted (`Verdicts.through_trusted`).
"""

from __future__ import annotations

from dataclasses import dataclass

from agentkit import Tier

__all__ = ["DECLARATIONS", "Declaration", "declaration"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Declaration:
    """One function's tier, provenance and egress."""

    tier: Tier
    untrusted: bool = False
    """Its results hold text a third party can write."""
    egress: bool = False
    """It sends data out (so no run that has read untrusted content may make it unasked)."""


_READ = Declaration(tier=Tier.READ_ONLY)
_READ_UNTRUSTED = Declaration(tier=Tier.READ_ONLY, untrusted=True)
_WRITE = Declaration(tier=Tier.EXTERNAL_REVERSIBLE)
_SEND = Declaration(tier=Tier.EXTERNAL_REVERSIBLE, egress=True)
_DELETE = Declaration(tier=Tier.IRREVERSIBLE)
_PAY = Declaration(tier=Tier.IRREVERSIBLE, egress=True)

DECLARATIONS: dict[str, dict[str, Declaration]] = {
    "workspace": {
        "send_email": _SEND,
        "delete_email": _DELETE,
        "get_unread_emails": _READ_UNTRUSTED,
        "get_sent_emails": _READ,
        "get_received_emails": _READ_UNTRUSTED,
        "get_draft_emails": _READ,
        "search_emails": _READ_UNTRUSTED,
        "search_contacts_by_name": _READ,
        "search_contacts_by_email": _READ,
        "get_current_day": _READ,
        "search_calendar_events": _READ_UNTRUSTED,
        "get_day_calendar_events": _READ_UNTRUSTED,
        "create_calendar_event": _SEND,
        "cancel_calendar_event": Declaration(tier=Tier.IRREVERSIBLE, egress=True),
        "reschedule_calendar_event": _SEND,
        "add_calendar_event_participants": _SEND,
        "append_to_file": _WRITE,
        "search_files_by_filename": _READ_UNTRUSTED,
        "create_file": _WRITE,
        "delete_file": _DELETE,
        "get_file_by_id": _READ_UNTRUSTED,
        "list_files": _READ_UNTRUSTED,
        "share_file": _SEND,
        "search_files": _READ_UNTRUSTED,
    },
    "travel": {
        "get_user_information": _READ,
        "get_all_hotels_in_city": _READ,
        "get_hotels_prices": _READ,
        "get_rating_reviews_for_hotels": _READ_UNTRUSTED,
        "get_hotels_address": _READ,
        "get_all_restaurants_in_city": _READ,
        "get_cuisine_type_for_restaurants": _READ,
        "get_restaurants_address": _READ,
        "get_rating_reviews_for_restaurants": _READ_UNTRUSTED,
        "get_dietary_restrictions_for_all_restaurants": _READ,
        "get_contact_information_for_restaurants": _READ,
        "get_price_for_restaurants": _READ,
        "check_restaurant_opening_hours": _READ,
        "get_all_car_rental_companies_in_city": _READ,
        "get_car_types_available": _READ,
        "get_rating_reviews_for_car_rental": _READ_UNTRUSTED,
        "get_car_fuel_options": _READ,
        "get_car_rental_address": _READ,
        "get_car_price_per_day": _READ,
        "create_calendar_event": _SEND,
        "search_calendar_events": _READ_UNTRUSTED,
        "get_day_calendar_events": _READ_UNTRUSTED,
        "cancel_calendar_event": Declaration(tier=Tier.IRREVERSIBLE, egress=True),
        "reserve_hotel": _PAY,
        "reserve_car_rental": _PAY,
        "reserve_restaurant": _PAY,
        "get_flight_information": _READ,
        "send_email": _SEND,
    },
    "banking": {
        "get_iban": _READ,
        "send_money": _PAY,
        "schedule_transaction": _PAY,
        "update_scheduled_transaction": _PAY,
        "get_balance": _READ,
        "get_most_recent_transactions": _READ_UNTRUSTED,
        "get_scheduled_transactions": _READ,
        "read_file": _READ_UNTRUSTED,
        "get_user_info": _READ,
        "update_password": _WRITE,
        "update_user_info": _WRITE,
    },
    "slack": {
        # A channel's name is written by whoever made it (an external channel's by an outsider), and a
        # member's name by the member.
        "get_channels": _READ_UNTRUSTED,
        "add_user_to_channel": _SEND,
        "read_channel_messages": _READ_UNTRUSTED,
        "read_inbox": _READ_UNTRUSTED,
        "send_direct_message": _SEND,
        "send_channel_message": _SEND,
        "get_users_in_channel": _READ_UNTRUSTED,
        "invite_user_to_slack": _SEND,
        "remove_user_from_slack": _DELETE,
        "get_webpage": Declaration(tier=Tier.READ_ONLY, untrusted=True, egress=True),
        "post_webpage": _SEND,
    },
}
"""Per suite, per function name: its declaration."""


def declaration(suite: str, function: str) -> Declaration:
    """The declaration of `function` in `suite`.

    Raises:
        KeyError: a function this table does not declare (a new AgentDojo release added it): declare it
            here before measuring, since an undeclared tool has no tier and would never run.
    """
    try:
        return DECLARATIONS[suite][function]
    except KeyError:
        raise KeyError(
            f"{suite}.{function} has no declaration in benchmarks/injection/declarations.py; add its tier, "
            "provenance and egress there"
        ) from None
